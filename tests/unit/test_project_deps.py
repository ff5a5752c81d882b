"""`kernelpack.toolchain.deps`: `depends` names resolved to include folders for a project."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpack.errors import ManifestError, UsageError
from kernelpack.project.locate import Project
from kernelpack.project.settings import Settings
from kernelpack.toolchain import deps
from kernelpack.toolchain.environment import BuildEnvironment, dep_variable


def _env(environ: dict[str, str]) -> BuildEnvironment:
    return BuildEnvironment.from_environ(environ)


def project(root: Path, **dep_targets: str) -> Project:
    return Project(
        root=root,
        pyproject=root / "pyproject.toml",
        dist_name="llm-ops",
        version="0.1.0",
        manifest_path=root / "llm_ops" / "kernels.toml",
        package="llm_ops",
        package_dir=root / "llm_ops",
        settings=Settings(source=root / "pyproject.toml", deps=dep_targets),
    )


def _where(proj: Project) -> tuple[Settings, Path]:
    """What `deps.resolve` needs of a project: its settings and its root."""
    return proj.settings, proj.root


def fake_cutlass_wheel(site: Path) -> Path:
    """The nvidia-cutlass wheel layout: cutlass_library/source/{include,tools/util/include}."""
    source = site / "cutlass_library" / "source"
    (source / "include" / "cutlass").mkdir(parents=True)
    (source / "tools" / "util" / "include" / "cutlass" / "util").mkdir(parents=True)
    (site / "cutlass_library" / "__init__.py").write_text("raise RuntimeError('imported')\n")
    return source


def test_cutlass_and_the_pinned_releases_are_built_in() -> None:
    assert deps.known_deps(None) == frozenset({"cutlass", *deps.PINNED_DEPS})
    assert {"cutlass_2_10", "cutlass_3_9", "cutlass_4_0", "cutlass_4_5"} <= deps.known_deps(None)


def test_project_deps_are_known(tmp_path: Path) -> None:
    settings = Settings(deps={"mylib": "third_party/mylib"})
    assert deps.known_deps(settings) == frozenset({"cutlass", "mylib", *deps.PINNED_DEPS})


def test_env_var_name() -> None:
    assert dep_variable("cutlass") == "KERNELPACK_CUTLASS_DIR"
    assert dep_variable("my-lib") == "KERNELPACK_MY_LIB_DIR"


def test_cutlass_from_the_wheel_without_importing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = fake_cutlass_wheel(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    folders = deps.resolve("cutlass", *_where(project(tmp_path)), environment=_env({}))
    assert folders == (source / "include", source / "tools" / "util" / "include")


def test_cutlass_without_headers_is_a_one_line_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "site" / "cutlass_library").mkdir(parents=True)
    (tmp_path / "site" / "cutlass_library" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(UsageError) as excinfo:
        deps.resolve("cutlass", *_where(project(tmp_path)), environment=_env({}))
    assert "nvidia-cutlass" in str(excinfo.value)
    assert "KERNELPACK_CUTLASS_DIR" in str(excinfo.value)
    assert "\n" not in str(excinfo.value)


def test_cutlass_checkout_from_env(tmp_path: Path) -> None:
    checkout = tmp_path / "cutlass"
    (checkout / "include" / "cutlass").mkdir(parents=True)
    environ = {"KERNELPACK_CUTLASS_DIR": str(checkout)}
    assert deps.resolve("cutlass", *_where(project(tmp_path)), environment=_env(environ)) == (
        checkout / "include",
    )


def test_cutlass_include_folder_from_env(tmp_path: Path) -> None:
    include = tmp_path / "include"
    (include / "cutlass").mkdir(parents=True)
    environ = {"KERNELPACK_CUTLASS_DIR": str(include)}
    assert deps.resolve("cutlass", *_where(project(tmp_path)), environment=_env(environ)) == (
        include,
    )


def test_env_override_that_is_not_a_folder(tmp_path: Path) -> None:
    environ = {"KERNELPACK_CUTLASS_DIR": str(tmp_path / "nowhere")}
    with pytest.raises(UsageError, match=r"KERNELPACK_CUTLASS_DIR=.*nowhere: not a folder"):
        deps.resolve(
            "cutlass",
            *_where(project(tmp_path)),
            environment=_env(environ),
        )


def test_project_dep_folder_relative_to_root(tmp_path: Path) -> None:
    (tmp_path / "third_party" / "mylib").mkdir(parents=True)
    proj = project(tmp_path, mylib="third_party/mylib")
    assert deps.resolve("mylib", *_where(proj), environment=_env({})) == (
        tmp_path / "third_party" / "mylib",
    )


def test_project_dep_from_installed_package_include(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "site" / "mylib_headers"
    (package / "include").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    proj = project(tmp_path, mylib="mylib_headers")
    assert deps.resolve("mylib", *_where(proj), environment=_env({})) == (package / "include",)


def test_project_dep_that_cannot_be_found_names_pyproject_and_key(tmp_path: Path) -> None:
    proj = project(tmp_path, mylib="not_installed_pkg_xyz")
    with pytest.raises(ManifestError) as excinfo:
        deps.resolve("mylib", *_where(proj), environment=_env({}))
    assert str(excinfo.value).startswith(
        f"{tmp_path / 'pyproject.toml'}: [tool.kernelpack.deps].mylib: "
    )


def test_project_dep_missing_folder(tmp_path: Path) -> None:
    proj = project(tmp_path, mylib="third_party/gone")
    with pytest.raises(ManifestError, match=r"\[tool\.kernelpack\.deps\]\.mylib: folder"):
        deps.resolve("mylib", *_where(proj), environment=_env({}))


def test_project_dep_replaces_builtin(tmp_path: Path) -> None:
    (tmp_path / "vendored" / "cutlass").mkdir(parents=True)
    proj = project(tmp_path, cutlass="vendored")
    assert deps.resolve("cutlass", *_where(proj), environment=_env({})) == (tmp_path / "vendored",)


def test_unknown_dep_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown dependency 'nope'"):
        deps.resolve("nope", *_where(project(tmp_path)), environment=_env({}))
