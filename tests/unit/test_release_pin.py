"""`kernelpack pin`: paste-ready [tool.uv.sources] pins, and pins checked against uv.lock."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib
from packaging.version import Version

from kernelpack.abitag import AbiTag, InvalidAbiTag
from kernelpack.cli import main
from kernelpack.errors import UsageError
from kernelpack.release.pins import IMPORT_FAILS, Wheel, pins

BASE = "https://github.com/o/r/releases/download/v0.8.0"
STABLE_X86 = "llm_ops-0.1.0+cu130stable2.10-cp310-abi3-linux_x86_64.whl"
STABLE_ARM = "llm_ops-0.1.0+cu130stable2.10-cp310-abi3-manylinux_2_28_aarch64.whl"


def _pin(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["pin", *argv])
    return code, capsys.readouterr().out


def test_prints_one_entry_per_platform_ready_to_paste(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _pin(capsys, STABLE_ARM, f"dist/{STABLE_X86}", "--url-base", BASE + "/")
    assert code == 0
    sources = tomllib.loads(out)["tool"]["uv"]["sources"]
    assert sources == {
        "llm-ops": [
            {"url": f"{BASE}/{STABLE_X86}", "marker": "platform_machine == 'x86_64'"},
            {"url": f"{BASE}/{STABLE_ARM}", "marker": "platform_machine == 'aarch64'"},
        ]
    }


def test_per_interpreter_wheels_get_python_markers() -> None:
    wheels = [
        Wheel.parse(f"pk-0.1.0+cu130torch2.11.0-cp{py}-cp{py}-linux_x86_64.whl")
        for py in ("312", "311")
    ]
    markers = [pin.marker for pin in pins(wheels, BASE)]
    assert markers == [
        "platform_machine == 'x86_64' and python_version == '3.11'",
        "platform_machine == 'x86_64' and python_version == '3.12'",
    ]


def test_abi3_wheels_get_no_python_marker() -> None:
    (pin,) = pins([Wheel.parse(STABLE_X86)], BASE)
    assert pin.marker == "platform_machine == 'x86_64'"


def test_two_wheels_for_one_platform_are_bad_input() -> None:
    other = "llm_ops-0.2.0+cu130stable2.10-cp310-abi3-linux_x86_64.whl"
    with pytest.raises(UsageError, match="both for platform_machine == 'x86_64'"):
        pins([Wheel.parse(STABLE_X86), Wheel.parse(other)], BASE)


def test_json_lists_every_pin(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _pin(capsys, STABLE_X86, "--url-base", BASE, "--json")
    assert code == 0
    assert json.loads(out)["sources"] == [
        {
            "package": "llm-ops",
            "url": f"{BASE}/{STABLE_X86}",
            "marker": "platform_machine == 'x86_64'",
            "wheel": STABLE_X86,
        }
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["not-a-wheel.whl", "--url-base", BASE],
        [STABLE_X86],
        ["llm_ops-0.1.0-cp310-abi3-win_amd64.whl", "--url-base", BASE],
    ],
    ids=["bad-name", "no-url-base", "not-linux"],
)
def test_bad_input_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert main(["pin", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err


def test_abi_tag_parses_torch_and_stable_labels() -> None:
    assert AbiTag.parse("cu130torch2.11.0") == AbiTag("cu130", "torch", Version("2.11.0"))
    assert AbiTag.parse("cu128stable2.10").cuda_major == 12
    with pytest.raises(InvalidAbiTag, match="'cu130'"):
        AbiTag.parse("cu130")


def _project(tmp_path: Path, url: str, torch: str) -> Path:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        textwrap.dedent(
            f"""\
            [project]
            name = "trainer"
            version = "1.0"

            [tool.uv.sources]
            llm-ops = [{{ url = "{url}", marker = "platform_machine == 'x86_64'" }}]
            other = {{ url = "https://example.com/other-1.0-py3-none-any.whl" }}
            """
        )
    )
    (tmp_path / "uv.lock").write_text(
        textwrap.dedent(
            f"""\
            version = 1
            [[package]]
            name = "torch"
            version = "{torch}"
            [[package]]
            name = "trainer"
            version = "1.0"
            """
        )
    )
    return pyproject


TORCH_PIN = f"{BASE}/llm_ops-0.1.0+cu130torch2.11.0-cp312-cp312-linux_x86_64.whl"


def test_check_passes_when_pin_torch_equals_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _pin(capsys, "--check", str(_project(tmp_path, TORCH_PIN, "2.11.0")))
    assert code == 0
    assert "1 kernel wheel pin(s) match torch 2.11.0" in out


def test_check_fails_when_lock_moved_torch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _pin(capsys, "--check", str(_project(tmp_path, TORCH_PIN, "2.12.0")))
    assert code == 1
    (line,) = out.splitlines()
    assert line.startswith("llm-ops: llm_ops-0.1.0+cu130torch2.11.0-")
    assert "needs torch 2.11.0, uv.lock has torch 2.12.0" in line
    assert line.endswith(IMPORT_FAILS)


def test_check_ignores_the_lock_torch_local_version_but_not_its_cuda(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _pin(capsys, "--check", str(_project(tmp_path, TORCH_PIN, "2.11.0+cu130")))[0] == 0
    code, out = _pin(capsys, "--check", str(_project(tmp_path, TORCH_PIN, "2.11.0+cu128")))
    assert code == 1
    assert "built for CUDA 13, uv.lock has torch 2.11.0+cu128 (CUDA 12)" in out


@pytest.mark.parametrize(("torch", "code"), [("2.10.0", 0), ("2.14.1", 0), ("2.9.1", 1)])
def test_check_stable_pin_needs_lock_torch_at_least_its_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], torch: str, code: int
) -> None:
    pyproject = _project(tmp_path, f"{BASE}/{STABLE_X86}", torch)
    assert _pin(capsys, "--check", str(pyproject))[0] == code


def test_check_json_reports_each_pin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pyproject = _project(tmp_path, TORCH_PIN, "2.12.0")
    code, out = _pin(capsys, "--check", str(pyproject), "--json")
    report = json.loads(out)
    assert code == 1
    assert report["ok"] is False and report["torch"] == ["2.12.0"]
    (pin,) = report["pins"]
    assert (pin["package"], pin["abi"], pin["ok"]) == ("llm-ops", "cu130torch2.11.0", False)


def test_check_without_lock_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pyproject = _project(tmp_path, TORCH_PIN, "2.11.0")
    (tmp_path / "uv.lock").unlink()
    assert main(["pin", "--check", str(pyproject)]) == 2
    assert "uv.lock: does not exist" in capsys.readouterr().err


def test_check_reads_an_explicit_lock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pyproject = _project(tmp_path, TORCH_PIN, "2.12.0")
    other = tmp_path / "other"
    other.mkdir()
    _project(other, TORCH_PIN, "2.11.0")
    code, _ = _pin(capsys, "--check", str(pyproject), "--lock", str(other / "uv.lock"))
    assert code == 0


def test_check_fails_on_a_path_source_holding_a_kernelpack_project(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pyproject = _project(tmp_path, TORCH_PIN, "2.11.0")
    assert main(["new", str(tmp_path / "deps" / "my-ops"), "--kernel", "scale"]) == 0
    pyproject.write_text(
        pyproject.read_text() + 'my-ops = { path = "deps/my-ops", editable = true }\n'
    )
    capsys.readouterr()
    code, out = _pin(capsys, "--check", str(pyproject))
    assert code == 1
    (line,) = out.splitlines()
    assert line.startswith("my-ops: path source deps/my-ops is a kernelpack source tree")
    assert "every uv lock would need nvcc" in line


def test_check_ignores_path_sources_of_other_projects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pyproject = _project(tmp_path, TORCH_PIN, "2.11.0")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "pyproject.toml").write_text('[project]\nname = "lib"\n')
    pyproject.write_text(pyproject.read_text() + 'lib = { path = "lib" }\n')
    assert _pin(capsys, "--check", str(pyproject))[0] == 0


def test_a_folder_stands_for_the_wheels_in_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in (STABLE_X86, STABLE_ARM):
        (tmp_path / name).write_bytes(b"")
    code, out = _pin(capsys, str(tmp_path), "--url-base", BASE)
    assert code == 0
    assert len(tomllib.loads(out)["tool"]["uv"]["sources"]["llm-ops"]) == 2


def test_an_empty_folder_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pin", str(tmp_path), "--url-base", BASE]) == 2
    assert "no .whl files" in capsys.readouterr().err


# --- markers are pairwise disjoint, as `uv lock` requires ------------------------------------

MIXED = [
    "kpdemo-0.3.0+cu130stable2.10-cp310-abi3-manylinux_2_34_x86_64.whl",
    "kpdemo-0.3.0+cu130torch2.14.1-cp311-cp311-manylinux_2_34_x86_64.whl",
    "kpdemo-0.3.0+cu130stable2.10-cp310-abi3-manylinux_2_28_aarch64.whl",
]
TWO_FLOORS = [
    "kpdemo-0.3.0+cu130stable2.10-cp310-abi3-manylinux_2_34_x86_64.whl",
    "kpdemo-0.3.0+cu130stable2.12-cp312-abi3-manylinux_2_34_x86_64.whl",
    "kpdemo-0.3.0+cu130torch2.14.1-cp311-cp311-manylinux_2_34_x86_64.whl",
    "kpdemo-0.3.0+cu130torch2.14.1-cp313-cp313-manylinux_2_34_x86_64.whl",
    "kpdemo-0.3.0+cu130torch2.14.1-cp311-cp311-manylinux_2_34_aarch64.whl",
    "kpdemo-0.3.0+cu130stable2.10-cp310-abi3-manylinux_2_28_aarch64.whl",
]


def test_abi3_wheel_beside_a_per_interpreter_wheel_excludes_that_python() -> None:
    markers = [pin.marker for pin in pins([Wheel.parse(name) for name in MIXED], BASE)]
    assert markers == [
        "platform_machine == 'x86_64' and python_version != '3.11'",
        "platform_machine == 'x86_64' and python_version == '3.11'",
        "platform_machine == 'aarch64'",
    ]


def test_abi3_wheels_of_two_floors_split_the_pythons_between_them() -> None:
    markers = [pin.marker for pin in pins([Wheel.parse(name) for name in TWO_FLOORS], BASE)]
    assert markers[:2] == [
        "platform_machine == 'x86_64' and python_version < '3.12' and python_version != '3.11'",
        "platform_machine == 'x86_64' and python_version >= '3.12' and python_version != '3.13'",
    ]


def _fake_wheel(folder: Path, filename: str) -> None:
    """A minimal wheel with this file name (uv reads its METADATA)."""
    from wheel.wheelfile import WheelFile

    name, version, *tags = filename.removesuffix(".whl").split("-")
    with WheelFile(folder / filename, "w") as whl:
        whl.writestr(f"{name}/__init__.py", "")
        info = f"{name}-{version}.dist-info"
        whl.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        wheel_text = f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {'-'.join(tags)}\n"
        whl.writestr(f"{info}/WHEEL", wheel_text)


@pytest.fixture
def wheel_server(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder served over HTTP on loopback by a real server process: (folder, its URL)."""
    folder = tmp_path / "release"
    folder.mkdir()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield folder, url
    finally:
        server.terminate()
        server.wait(timeout=10)


def _uv_lock(tmp_path: Path, sources: str) -> subprocess.CompletedProcess[str]:
    project = tmp_path / "trainer"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            """\
            [project]
            name = "trainer"
            version = "1.0"
            requires-python = ">=3.10"
            dependencies = ["kpdemo"]

            [tool.uv]
            environments = [
                "sys_platform == 'linux' and platform_machine == 'x86_64'",
                "sys_platform == 'linux' and platform_machine == 'aarch64'",
            ]

            """
        )
        + sources
    )
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache"), "UV_NO_CONFIG": "1"}
    return subprocess.run(
        [uv, "lock", "--no-index", "--directory", str(project)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize("names", [MIXED, TWO_FLOORS], ids=["abi3+cp311", "two-abi3-floors"])
def test_uv_lock_accepts_the_printed_pins(
    tmp_path: Path,
    wheel_server: tuple[Path, str],
    capsys: pytest.CaptureFixture[str],
    names: list[str],
) -> None:
    folder, url = wheel_server
    for name in names:
        _fake_wheel(folder, name)
    code, out = _pin(capsys, str(folder), "--url-base", url)
    assert code == 0
    locked = _uv_lock(tmp_path, out)
    assert locked.returncode == 0, locked.stderr
    lock = tomllib.loads((tmp_path / "trainer" / "uv.lock").read_text())
    sources = {p["source"]["url"] for p in lock["package"] if p["name"] == "kpdemo"}
    assert sources == {f"{url}/{name}" for name in names}
