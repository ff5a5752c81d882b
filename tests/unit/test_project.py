"""`kernelpack.project.locate.locate` and `[tool.kernelpack]` settings: from a PATH to a project."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from fakes.projects import write_tree

from kernelpack.errors import ManifestError, UsageError
from kernelpack.project.locate import locate
from kernelpack.project.manifest import ANY_PLATFORM
from kernelpack.project.settings import Settings
from kernelpack_runtime.arch import Arch

# Every test runs in its tmp_path.
pytestmark = pytest.mark.usefixtures("in_tmp")

KERNELS = '[rmsnorm]\nsources = ["csrc/rmsnorm.cu"]\narch = "9.0a"\n'
PYPROJECT = """\
[project]
name = "LLM.Ops"
version = "0.1.0"

[tool.kernelpack]
"""


def make_package(folder: Path, kernels: str = KERNELS) -> Path:
    """A package folder with kernels.toml and rmsnorm's source; returns kernels.toml."""
    write_tree(folder, {"rmsnorm/csrc/rmsnorm.cu": "// x\n", "kernels.toml": kernels})
    return folder / "kernels.toml"


def make_project(root: Path, pyproject: str = PYPROJECT, *, src: bool = False) -> Path:
    """A project with pyproject.toml and an llm_ops package (flat or src layout)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(textwrap.dedent(pyproject))
    return make_package(root / "src" / "llm_ops" if src else root / "llm_ops")


# --- locating ---------------------------------------------------------------------------


def test_locates_from_the_manifest_file(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "proj")
    project = locate(manifest)
    assert project.manifest_path == manifest
    assert project.root == tmp_path / "proj"
    assert project.pyproject == tmp_path / "proj" / "pyproject.toml"


def test_locates_from_the_package_folder(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "proj")
    assert locate(manifest.parent).manifest_path == manifest


def test_locates_from_the_project_folder(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "proj")
    assert locate(tmp_path / "proj").manifest_path == manifest


def test_locates_from_the_pyproject_file(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "proj")
    assert locate(tmp_path / "proj" / "pyproject.toml").manifest_path == manifest


def test_defaults_to_the_working_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = make_project(tmp_path / "proj")
    monkeypatch.chdir(tmp_path / "proj")
    assert locate().manifest_path == manifest


def test_relative_path_is_made_absolute(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "proj")
    assert locate(Path("proj/llm_ops")).manifest_path == manifest


def test_src_layout_from_project_folder(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "proj", src=True)
    project = locate(tmp_path / "proj")
    assert project.manifest_path == manifest
    assert project.package_dir == tmp_path / "proj" / "src" / "llm_ops"


def test_src_layout_from_manifest_finds_pyproject_above_src(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "proj", src=True)
    project = locate(manifest)
    assert project.root == tmp_path / "proj"
    assert project.dist_name == "llm-ops"


def test_project_facts_come_from_pyproject(tmp_path: Path) -> None:
    project = locate(make_project(tmp_path / "proj"))
    assert project.dist_name == "llm-ops"
    assert project.version == "0.1.0"
    assert project.package == "llm_ops"
    assert project.package_dir == tmp_path / "proj" / "llm_ops"


def test_manifest_without_pyproject_is_its_own_project(tmp_path: Path) -> None:
    manifest = make_package(tmp_path / "llm_ops")
    project = locate(manifest)
    assert project.root == tmp_path
    assert project.pyproject is None
    assert project.dist_name == "llm-ops"
    assert project.version == "0.0.0"
    assert project.settings == Settings()


def test_pyproject_without_tool_table_still_names_the_project(tmp_path: Path) -> None:
    manifest = make_project(
        tmp_path / "proj", '[project]\nname = "prime-kernels"\nversion = "2.0"\n'
    )
    project = locate(manifest)
    assert project.dist_name == "prime-kernels"
    assert project.version == "2.0"


def test_dynamic_version_falls_back_to_zero(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "proj", '[project]\nname = "x"\ndynamic = ["version"]\n')
    assert locate(manifest).version == "0.0.0"


def test_pyproject_naming_another_manifest_is_not_this_packages(tmp_path: Path) -> None:
    pyproject = PYPROJECT + 'manifest = "other/kernels.toml"\n'
    manifest = make_project(tmp_path / "proj", pyproject)
    project = locate(manifest)
    assert project.pyproject is None
    assert project.root == tmp_path / "proj"


def test_settings_manifest_path_is_followed(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "pyproject.toml").write_text(PYPROJECT + 'manifest = "kernels_pkg/ops"\n')
    manifest = make_package(root / "kernels_pkg" / "ops")
    project = locate(root)
    assert project.manifest_path == manifest
    assert project.package == "ops"


def test_env_prefix_defaults_to_package_upper_cased(tmp_path: Path) -> None:
    assert locate(make_project(tmp_path / "proj")).env_prefix == "LLM_OPS"


def test_env_prefix_from_settings(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "proj", PYPROJECT + 'env-prefix = "OPS"\n')
    assert locate(manifest).env_prefix == "OPS"


def test_load_manifest_applies_settings(tmp_path: Path) -> None:
    kernels = '[rmsnorm]\nsources = ["csrc/rmsnorm.cu"]\n'
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "pyproject.toml").write_text(
        PYPROJECT + 'arch = ["9.0a"]\nabi = "stable"\n'
    )
    make_package(tmp_path / "proj" / "llm_ops", kernels)
    spec = locate(tmp_path / "proj").load_manifest().kernel("rmsnorm")
    assert spec.arch == {ANY_PLATFORM: (Arch(9, 0, "a"),)}
    assert spec.abi == "stable"


def test_load_manifest_passes_allow_missing_sources(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "proj")
    (manifest.parent / "rmsnorm" / "csrc" / "rmsnorm.cu").unlink()
    project = locate(manifest)
    assert project.load_manifest(allow_missing_sources=True).kernels[0].missing_sources
    with pytest.raises(ManifestError):
        project.load_manifest()


def test_project_is_frozen(tmp_path: Path) -> None:
    project = locate(make_project(tmp_path / "proj"))
    with pytest.raises(AttributeError):
        project.version = "1.0"  # type: ignore[misc]


# --- PATHs that name no project: one-line UsageError (exit 2) ---------------------------


def _assert_one_line_usage_error(path: Path, fragment: str) -> None:
    with pytest.raises(UsageError) as excinfo:
        locate(path)
    message = str(excinfo.value)
    assert excinfo.value.exit_code == 2
    assert "\n" not in message
    assert fragment in message, message


def test_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    _assert_one_line_usage_error(tmp_path / "nowhere", "nowhere: does not exist")


def test_empty_folder_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    _assert_one_line_usage_error(
        tmp_path / "empty", "no kernels.toml, pyproject.toml or build.toml here"
    )


def test_pyproject_without_tool_kernelpack_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "pyproject.toml").write_text('[project]\nname = "x"\n')
    _assert_one_line_usage_error(tmp_path / "proj", "no [tool.kernelpack] table")


def test_non_toml_file_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "kernel.cu").write_text("// x\n")
    _assert_one_line_usage_error(tmp_path / "kernel.cu", "not a TOML file")


def test_project_without_manifest_is_a_manifest_error(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "pyproject.toml").write_text(PYPROJECT)
    _assert_one_line_usage_error(tmp_path / "proj", "[tool.kernelpack].manifest: no <package>")


def test_project_with_two_manifests_asks_which(tmp_path: Path) -> None:
    make_project(tmp_path / "proj", '[project]\nname = "x"\n[tool.kernelpack]\n')
    make_package(tmp_path / "proj" / "other_ops")
    _assert_one_line_usage_error(tmp_path / "proj", "several manifests")


def test_settings_manifest_that_does_not_exist(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "pyproject.toml").write_text(PYPROJECT + 'manifest = "gone.toml"\n')
    _assert_one_line_usage_error(tmp_path / "proj", "[tool.kernelpack].manifest:")


# --- [tool.kernelpack] ------------------------------------------------------------------


def test_settings_read_every_key(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        PYPROJECT
        + textwrap.dedent(
            """\
            manifest = "llm_ops/kernels.toml"
            abi = "stable"
            arch = { x86_64 = "9.0a" }
            env-prefix = "LLM"
            [tool.kernelpack.deps]
            mylib = "third_party/mylib/include"
            """
        )
    )
    settings = Settings.from_pyproject(pyproject)
    assert settings == Settings(
        source=pyproject,
        manifest=tmp_path / "llm_ops" / "kernels.toml",
        abi="stable",
        arch={"x86_64": (Arch(9, 0, "a"),)},
        env_prefix="LLM",
        deps={"mylib": "third_party/mylib/include"},
    )


def test_pyproject_without_table_has_no_settings(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert Settings.from_pyproject(tmp_path / "pyproject.toml") is None


@pytest.mark.parametrize(
    ("body", "where", "fragment"),
    [
        pytest.param('colour = "red"\n', "[tool.kernelpack].colour", "unknown key", id="unknown"),
        pytest.param(
            'env_prefix = "X"\n', "[tool.kernelpack].env_prefix", '"env-prefix"', id="typo"
        ),
        pytest.param('abi = "classic"\n', "[tool.kernelpack].abi", '"torch"', id="abi"),
        pytest.param('arch = "9.5"\n', "[tool.kernelpack].arch", '"9.5"', id="arch"),
        pytest.param(
            'env-prefix = "LLM-OPS"\n', "[tool.kernelpack].env-prefix", "identifier", id="prefix"
        ),
        pytest.param("manifest = 3\n", "[tool.kernelpack].manifest", "integer", id="manifest"),
        pytest.param(
            'manifest = "/abs/kernels.toml"\n', "[tool.kernelpack].manifest", "absolute", id="abs"
        ),
        pytest.param('deps = "x"\n', "[tool.kernelpack].deps", "not a table", id="deps-type"),
        pytest.param(
            "deps = { mylib = 1 }\n", "[tool.kernelpack.deps].mylib", "integer", id="dep-type"
        ),
        pytest.param(
            'deps = { mylib = "/opt/x" }\n', "[tool.kernelpack.deps].mylib", "absolute", id="dep"
        ),
    ],
)
def test_bad_settings_are_one_line_naming_pyproject_and_key(
    tmp_path: Path, body: str, where: str, fragment: str
) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT + body)
    with pytest.raises(ManifestError) as excinfo:
        Settings.from_pyproject(tmp_path / "pyproject.toml")
    message = str(excinfo.value)
    assert "\n" not in message
    assert message.startswith(f"pyproject.toml: {where}: "), message
    assert fragment in message, message


def test_tool_kernelpack_that_is_not_a_table(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool]\nkernelpack = 1\n")
    with pytest.raises(ManifestError, match=r"^pyproject\.toml: tool\.kernelpack: is not a table"):
        Settings.from_pyproject(tmp_path / "pyproject.toml")


def test_project_locate_reports_bad_settings(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "proj", PYPROJECT + 'abi = "nope"\n')
    with pytest.raises(ManifestError, match=r"proj/pyproject\.toml: \[tool\.kernelpack\]\.abi"):
        locate(manifest)
