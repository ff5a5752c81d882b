"""The pytest plugin: `kernel`/`gpu` marks, `--kernels-require`, the status header."""

from __future__ import annotations

import contextlib
from importlib.metadata import entry_points

import pytest
from registry_support import built, make_package, skipped, unique_name

pytest_plugins = ["pytester"]

# Loading a kernel imports torch. Pytester forgets the modules first imported during a test,
# and torch cannot be imported a second time in one process: import it before any test.
with contextlib.suppress(ImportError):
    import torch  # noqa: F401

FAKE_GPU_CONFTEST = """
from kernelpack_runtime import set_default_probe
from kernelpack_runtime.testing.fakes import fake_probe

def pytest_configure(config):
    config._kp_previous_probe = set_default_probe(fake_probe("9.0"))

def pytest_unconfigure(config):
    set_default_probe(config._kp_previous_probe)
"""

NO_GPU_CONFTEST = FAKE_GPU_CONFTEST.replace(
    'fake_probe("9.0")', 'no_device_probe("fake: no GPU here")'
).replace("import fake_probe", "import no_device_probe")


@pytest.fixture
def kp(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> str:
    """A package with one built kernel `k` (sm_90a) and one skipped kernel `s`."""
    monkeypatch.delenv("KERNELPACK_REQUIRE", raising=False)
    monkeypatch.syspath_prepend(str(pytester.path))
    name = unique_name()
    make_package(
        pytester.path,
        name,
        {"k": built("k", name), "s": skipped("nvcc-missing", "nvcc not found on PATH")},
    )
    return name


def status_lines(kp: str) -> list[str]:
    """The status table of `kp` under NO_GPU_CONFTEST."""
    return [
        "kernelpack: device none (fake: no GPU here); unavailable kernels skip",
        f"kernelpack: {kp} 0.1.0+cu130torch2.14.1",
        "  k  no-device: no CUDA device visible: fake: no GPU here",
        "  s  skipped: nvcc not found on PATH",
    ]


def write_test(pytester: pytest.Pytester, body: str) -> None:
    pytester.makepyfile(test_it="import pytest\n\n" + body)


def test_plugin_is_registered_through_the_pytest11_entry_point() -> None:
    plugins = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert plugins.get("kernelpack") == "kernelpack_runtime.testing.plugin"


def test_markers_are_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.kernel(*names):*", "@pytest.mark.gpu:*"])


def test_marks_pass_strict_markers(pytester: pytest.Pytester) -> None:
    write_test(pytester, "@pytest.mark.gpu\n@pytest.mark.kernel('a.b')\ndef test_x(): pass\n")
    result = pytester.runpytest("--strict-markers", "--collect-only")
    assert result.ret == 0


def test_unavailable_kernel_is_skipped_with_its_reason(pytester: pytest.Pytester, kp: str) -> None:
    pytester.makeconftest(NO_GPU_CONFTEST)
    write_test(pytester, f"@pytest.mark.kernel('{kp}.k')\ndef test_x(): pass\n")
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [f"SKIPPED*kernel {kp}.k unavailable (no-device): no CUDA device visible: fake: no GPU*"]
    )


def test_skipped_kernel_shows_the_build_reason(pytester: pytest.Pytester, kp: str) -> None:
    pytester.makeconftest(FAKE_GPU_CONFTEST)
    write_test(pytester, f"@pytest.mark.kernel('{kp}.s')\ndef test_x(): pass\n")
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*(not-built)*nvcc not found on PATH*"])


def test_available_kernel_runs_the_test(pytester: pytest.Pytester, kp: str) -> None:
    pytester.makeconftest(FAKE_GPU_CONFTEST)
    write_test(pytester, f"@pytest.mark.kernel('{kp}.k')\ndef test_x(): pass\n")
    pytester.runpytest().assert_outcomes(passed=1)


def test_every_named_kernel_must_be_available(pytester: pytest.Pytester, kp: str) -> None:
    pytester.makeconftest(FAKE_GPU_CONFTEST)
    write_test(pytester, f"@pytest.mark.kernel('{kp}.k', '{kp}.s')\ndef test_x(): pass\n")
    pytester.runpytest().assert_outcomes(skipped=1)


def test_kernels_require_option_turns_the_skip_into_a_failure(
    pytester: pytest.Pytester, kp: str
) -> None:
    pytester.makeconftest(NO_GPU_CONFTEST)
    write_test(pytester, f"@pytest.mark.kernel('{kp}.k')\ndef test_x(): pass\n")
    result = pytester.runpytest("--kernels-require")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*required (--kernels-require*kernel {kp}.k unavailable*"])
    assert result.ret == 1


def test_kernelpack_require_env_turns_the_skip_into_a_failure(
    pytester: pytest.Pytester, kp: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(NO_GPU_CONFTEST)
    monkeypatch.setenv("KERNELPACK_REQUIRE", "1")
    write_test(pytester, f"@pytest.mark.kernel('{kp}.k')\ndef test_x(): pass\n")
    pytester.runpytest().assert_outcomes(errors=1)


def test_kernelpack_require_that_is_not_a_boolean_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELPACK_REQUIRE", "ture")
    write_test(pytester, "def test_x(): pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*KERNELPACK_REQUIRE=ture is not a boolean; use 1 or 0"])


def test_require_fails_before_fixtures_run(pytester: pytest.Pytester, kp: str) -> None:
    pytester.makeconftest(NO_GPU_CONFTEST)
    write_test(
        pytester,
        "@pytest.fixture\ndef on_gpu():\n    raise AssertionError('fixture ran')\n\n"
        f"@pytest.mark.kernel('{kp}.k')\ndef test_x(on_gpu): pass\n",
    )
    result = pytester.runpytest("--kernels-require")
    result.assert_outcomes(errors=1)
    result.stdout.no_fnmatch_line("*fixture ran*")


def test_gpu_mark_skips_without_a_device(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(NO_GPU_CONFTEST)
    write_test(pytester, "@pytest.mark.gpu\ndef test_x(): pass\n")
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*needs a GPU: no CUDA device visible: fake: no GPU here"])


def test_gpu_mark_fails_without_a_device_when_required(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(NO_GPU_CONFTEST)
    write_test(pytester, "@pytest.mark.gpu\ndef test_x(): pass\n")
    pytester.runpytest("--kernels-require").assert_outcomes(errors=1)


def test_gpu_mark_runs_with_a_device(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FAKE_GPU_CONFTEST)
    write_test(pytester, "@pytest.mark.gpu\ndef test_x(): pass\n")
    pytester.runpytest().assert_outcomes(passed=1)


def test_unknown_kernel_name_fails_even_without_require(pytester: pytest.Pytester, kp: str) -> None:
    pytester.makeconftest(FAKE_GPU_CONFTEST)
    write_test(pytester, f"@pytest.mark.kernel('{kp}.typo')\ndef test_x(): pass\n")
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*has no kernel 'typo' (its kernels: k, s)*"])


def test_uninstalled_package_skips(pytester: pytest.Pytester) -> None:
    write_test(pytester, "@pytest.mark.kernel('kp_not_installed.k')\ndef test_x(): pass\n")
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*package 'kp_not_installed' is not installed*"])


def test_header_prints_the_status_of_the_named_packages(pytester: pytest.Pytester, kp: str) -> None:
    pytester.makeconftest(NO_GPU_CONFTEST)
    write_test(pytester, f"@pytest.mark.kernel('{kp}.k')\ndef test_x(): pass\n")
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(status_lines(kp))


def test_under_xdist_the_status_table_ends_the_summary(pytester: pytest.Pytester, kp: str) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(NO_GPU_CONFTEST)
    write_test(pytester, f"@pytest.mark.kernel('{kp}.k')\ndef test_x(): pass\n")
    result = pytester.runpytest("-n", "1")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*- kernelpack -*", *status_lines(kp)])


def test_header_is_quiet_when_no_test_names_a_kernel(pytester: pytest.Pytester) -> None:
    write_test(pytester, "def test_x(): pass\n")
    result = pytester.runpytest()
    result.stdout.no_fnmatch_line("kernelpack:*")


def test_skip_is_reported_at_the_tests_location(pytester: pytest.Pytester, kp: str) -> None:
    pytester.makeconftest(NO_GPU_CONFTEST)
    write_test(pytester, f"@pytest.mark.kernel('{kp}.k')\ndef test_x(): pass\n")
    result = pytester.runpytest("-rs")
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_it.py:3: kernel*"])


def test_missing_gpu_is_said_once_for_gpu_and_kernel_marks(
    pytester: pytest.Pytester, kp: str
) -> None:
    pytester.makeconftest(NO_GPU_CONFTEST)
    write_test(pytester, f"@pytest.mark.gpu\n@pytest.mark.kernel('{kp}.k')\ndef test_x(): pass\n")
    result = pytester.runpytest("-rs")
    result.stdout.fnmatch_lines(
        ["SKIPPED*: needs a GPU: no CUDA device visible: fake: no GPU here"]
    )
    result.stdout.no_fnmatch_line("*unavailable (no-device)*")
