"""`kernelpack bridge`: a venv's packages made visible to another real interpreter.

The "system" interpreter is a second venv (its purelib receives the `.pth`), so nothing is
written into a real system site-packages. Another minor version is a real other Python when
the machine has one (pyenv); another ABI is an edge fake: a script that answers the probe."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import venvs

from kernelpack.bazel.bridge import pth_name
from kernelpack.cli import main

HERE = f"{sys.version_info.major}.{sys.version_info.minor}"


def make_venv(path: Path, python: str = sys.executable) -> Path:
    subprocess.run([python, "-m", "venv", "--without-pip", str(path)], check=True)
    return path


def purelib(venv: Path) -> Path:
    return venvs.purelib(venv / "bin" / "python")


def imports(venv: Path, module: str) -> bool:
    done = subprocess.run([str(venv / "bin" / "python"), "-c", f"import {module}"], check=False)
    return done.returncode == 0


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A venv with `marker` installed, an editable-style `.pth` and a `setuptools`-style one."""
    venv = make_venv(tmp_path / "image-venv")
    site = purelib(venv)
    (site / "marker").mkdir()
    (site / "marker" / "__init__.py").write_text("WHERE = 'venv'\n")
    editable = tmp_path / "checkout" / "src"
    (editable / "editable_pkg").mkdir(parents=True)
    (editable / "editable_pkg" / "__init__.py").touch()
    (site / "_editable_pkg.pth").write_text(f"{os.path.relpath(editable, site)}\n")
    (site / "hook.pth").write_text("import os; os.environ.setdefault('BRIDGE_HOOK', '1')\n")
    return venv


@pytest.fixture
def system(tmp_path: Path) -> Path:
    """The interpreter that should see the source venv's packages."""
    return make_venv(tmp_path / "system-python")


def bridge(*args: str) -> int:
    return main(["bridge", *args])


def bridge_file(system: Path, source: Path) -> Path:
    return purelib(system) / pth_name(source)


def test_bridge_makes_the_venvs_packages_importable(source: Path, system: Path) -> None:
    assert not imports(system, "marker")
    assert bridge("--venv", str(source), "--python", str(system / "bin" / "python")) == 0
    assert imports(system, "marker")


def test_bridge_writes_plain_path_lines_only(source: Path, system: Path) -> None:
    bridge("--venv", str(source), "--python", str(system / "bin" / "python"))
    lines = bridge_file(system, source).read_text().splitlines()
    assert [line for line in lines if not line.startswith("#")] == [str(purelib(source))]
    assert not imports(system, "editable_pkg")


def test_bridge_twice_changes_nothing(
    source: Path, system: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    python = str(system / "bin" / "python")
    bridge("--venv", str(source), "--python", python)
    before = bridge_file(system, source).read_bytes()
    capsys.readouterr()
    assert bridge("--venv", str(source), "--python", python) == 0
    assert capsys.readouterr().out.startswith("unchanged ")
    assert bridge_file(system, source).read_bytes() == before


def test_process_pth_carries_editable_installs_over(source: Path, system: Path) -> None:
    python = str(system / "bin" / "python")
    assert bridge("--venv", str(source), "--python", python, "--process-pth") == 0
    assert imports(system, "editable_pkg")


def test_process_pth_copies_import_lines_and_absolute_paths(source: Path, system: Path) -> None:
    bridge("--venv", str(source), "--python", str(system / "bin" / "python"), "--process-pth")
    lines = bridge_file(system, source).read_text().splitlines()
    assert "import os; os.environ.setdefault('BRIDGE_HOOK', '1')" in lines
    assert str(source.parent / "checkout" / "src") in lines


def test_remove_takes_the_bridge_away(source: Path, system: Path) -> None:
    python = str(system / "bin" / "python")
    bridge("--venv", str(source), "--python", python)
    assert bridge("--venv", str(source), "--python", python, "--remove") == 0
    assert not bridge_file(system, source).exists()
    assert not imports(system, "marker")


def test_remove_without_a_bridge_says_absent(
    source: Path, system: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        bridge("--venv", str(source), "--python", str(system / "bin" / "python"), "--remove") == 0
    )
    assert capsys.readouterr().out.startswith("absent ")


def test_json_reports_the_file_and_its_paths(
    source: Path, system: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bridge("--venv", str(source), "--python", str(system / "bin" / "python"), "--json")
    report = json.loads(capsys.readouterr().out)
    assert report["action"] == "wrote"
    assert report["pth"] == str(bridge_file(system, source))
    assert report["paths"] == [str(purelib(source))]


def test_default_python_is_python3_on_path(
    source: Path, system: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{system / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert bridge("--venv", str(source)) == 0
    assert imports(system, "marker")


def other_minor_python() -> str | None:
    """A real interpreter of another minor version (3.8 or newer), if the machine has one."""
    found = []
    for python in glob.glob("/root/.pyenv/versions/3.*/bin/python3"):
        minor = int(Path(python).parents[1].name.split(".")[1])
        if minor >= 8 and minor != sys.version_info.minor:
            found.append((minor, python))
    return max(found)[1] if found else None


@pytest.mark.skipif(other_minor_python() is None, reason=f"no Python other than {HERE} here")
def test_bridge_refuses_another_minor_version(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = make_venv(tmp_path / "other", str(other_minor_python()))
    assert bridge("--venv", str(source), "--python", str(other / "bin" / "python")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"the venv has cpython {HERE}" in err
    assert not bridge_file(other, source).exists()


def test_bridge_refuses_another_abi(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = tmp_path / "python3t"
    answer = {
        "executable": str(fake),
        "implementation": "cpython",
        "version": [sys.version_info.major, sys.version_info.minor],
        "abiflags": "t",
        "soabi": f"cpython-{sys.version_info.major}{sys.version_info.minor}t-x86_64-linux-gnu",
        "purelib": str(tmp_path / "fake-site"),
        "platlib": str(tmp_path / "fake-site"),
    }
    fake.write_text(f"#!/bin/sh\necho '{json.dumps(answer)}'\n")
    fake.chmod(0o755)
    assert bridge("--venv", str(source), "--python", str(fake)) == 2
    assert "abiflags 't'" in capsys.readouterr().err
    assert not (tmp_path / "fake-site").exists()


def test_bridge_into_the_venvs_own_interpreter_is_refused(
    source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bridge("--venv", str(source), "--python", str(source / "bin" / "python")) == 2
    assert "nothing to bridge" in capsys.readouterr().err


def test_bridge_of_a_folder_that_is_not_a_venv_is_bad_input(
    tmp_path: Path, system: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bridge("--venv", str(tmp_path), "--python", str(system / "bin" / "python")) == 2
    assert "not a virtual environment" in capsys.readouterr().err


def test_bridge_file_name_depends_on_the_venv_path(tmp_path: Path) -> None:
    first, second = pth_name(tmp_path / "a"), pth_name(tmp_path / "b")
    assert first != second
    assert first.startswith("kernelpack-bridge-") and first.endswith(".pth")


def test_venv_path_with_a_newline_is_refused_and_writes_no_import_line(
    tmp_path: Path, system: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A real venv whose folder name carries a line that `site` would execute.
    hostile = make_venv(tmp_path / "v\nimport os; os.environ['BRIDGE_PWNED'] = '1'\n")
    before = set(purelib(system).iterdir())
    code = bridge("--venv", str(hostile), "--python", str(system / "bin" / "python"))
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "'\\n'" in err
    assert set(purelib(system).iterdir()) == before
    env = {k: v for k, v in os.environ.items() if k != "BRIDGE_PWNED"}
    done = subprocess.run(
        [str(system / "bin" / "python"), "-c", "import os; print(os.environ.get('BRIDGE_PWNED'))"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert done.stdout.strip() == "None"
