"""Core metadata of kernel wheels and sdists: `[project]` through pyproject-metadata, the run-time
requirements kernelpack adds, and the one-line errors for a bad `[project]`."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from fakes.projects import write_tree
from packaging.metadata import Metadata
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import kernelpack_runtime
from kernelpack.abitag import AbiTag
from kernelpack.backend.metadata import (
    check_requires_python,
    core_metadata,
    entry_points_text,
    requirements,
    torch_requirement,
)
from kernelpack.cli import main
from kernelpack.errors import UsageError
from kernelpack.project.locate import Project, locate
from kernelpack_runtime.record import RUNTIME_REQUIREMENT

# Every test runs in its tmp_path.
pytestmark = pytest.mark.usefixtures("in_tmp")

KERNELS = '[scale]\nsources = ["csrc/scale.cu"]\narch = "9.0a"\nabi = "stable"\n'

RICH = """\
[project]
name = "My.Ops"
version = "1.2.3"
description = "CUDA kernels"
readme = "README.md"
requires-python = ">=3.10"
license = "apache-2.0 OR mit"
license-files = ["LICENSE", "licenses/*.txt"]
authors = [{name = "Ada Lovelace", email = "ada@example.org"}, {name = "Team"}]
maintainers = [{email = "ops@example.org"}]
keywords = ["cuda", "kernels"]
classifiers = ["Programming Language :: Python :: 3", "Operating System :: POSIX :: Linux"]
dependencies = ["numpy>=1.26"]

[project.optional-dependencies]
bench = ["triton>=3.0; platform_machine == 'x86_64'"]

[project.urls]
Homepage = "https://example.org/my-ops"
Source = "https://github.com/example/my-ops"

[project.scripts]
my-ops-bench = "my_ops.bench:main"

[project.entry-points."kernelpack.plugins"]
ops = "my_ops.plugin"

[tool.kernelpack]
"""


def make_project(root: Path, pyproject: str = RICH, files: dict[str, str] | None = None) -> Project:
    project = {
        "pyproject.toml": textwrap.dedent(pyproject),
        "my_ops/scale/csrc/scale.cu": "// x\n",
        "my_ops/kernels.toml": KERNELS,
    }
    return locate(write_tree(root, {**project, **(files or {})}))


RICH_FILES = {
    "README.md": "# My ops\n\nFast kernels.\n",
    "LICENSE": "Apache License 2.0\n",
    "licenses/MIT.txt": "MIT License\n",
}


def _read_back(text: str) -> Metadata:
    return Metadata.from_email(text, validate=True)


# --- a rich [project] round-trips ------------------------------------------------------------


def test_rich_project_round_trips_into_metadata_read_back_by_packaging(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", files=RICH_FILES)
    version = "1.2.3+cu130stable2.10"
    wanted = requirements(project, AbiTag.parse("cu130stable2.10"))
    meta = _read_back(core_metadata(project, version, wanted).text())
    assert meta.name == "My.Ops"
    assert meta.version == Version(version)
    assert meta.summary == "CUDA kernels"
    assert meta.description == "# My ops\n\nFast kernels.\n"
    assert meta.description_content_type == "text/markdown"
    assert meta.license_expression == "Apache-2.0 OR MIT"
    assert meta.license_files == ["LICENSE", "licenses/MIT.txt"]
    assert meta.author == "Team"
    assert meta.author_email == "Ada Lovelace <ada@example.org>"
    assert "ops@example.org" in (meta.maintainer_email or "")
    assert meta.keywords == ["cuda", "kernels"]
    assert meta.classifiers == [
        "Programming Language :: Python :: 3",
        "Operating System :: POSIX :: Linux",
    ]
    assert meta.project_urls == {
        "Homepage": "https://example.org/my-ops",
        "Source": "https://github.com/example/my-ops",
    }
    assert meta.requires_python == SpecifierSet(">=3.10")
    assert meta.provides_extra == ["bench"]
    assert [str(r) for r in meta.requires_dist or []] == [
        RUNTIME_REQUIREMENT.replace(">=0.1,<0.2", "<0.2,>=0.1"),
        "torch>=2.10",
        "numpy>=1.26",
        'triton>=3.0; platform_machine == "x86_64" and extra == "bench"',
    ]


def test_license_files_are_the_files_the_globs_match(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", files=RICH_FILES)
    files = core_metadata(project).license_files
    assert [(path.read_text(), name) for path, name in files] == [
        ("Apache License 2.0\n", "LICENSE"),
        ("MIT License\n", "licenses/MIT.txt"),
    ]


def test_license_files_default_to_license_and_notice_files(tmp_path: Path) -> None:
    pyproject = '[project]\nname = "my-ops"\nversion = "1"\nlicense = "MIT"\n[tool.kernelpack]\n'
    files = {"LICENSE.txt": "MIT\n", "NOTICE": "n\n", "README.md": "r\n"}
    project = make_project(tmp_path / "p", pyproject, files)
    assert [name for _, name in core_metadata(project).license_files] == ["LICENSE.txt", "NOTICE"]


def test_readme_table_with_text_becomes_the_description(tmp_path: Path) -> None:
    pyproject = (
        '[project]\nname = "my-ops"\nversion = "1"\n'
        'readme = {text = "Plain words.", content-type = "text/plain"}\n[tool.kernelpack]\n'
    )
    meta = _read_back(core_metadata(make_project(tmp_path / "p", pyproject)).text())
    assert (meta.description, meta.description_content_type) == ("Plain words.", "text/plain")


def test_entry_points_hold_scripts_and_named_groups(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", files=RICH_FILES)
    assert entry_points_text(core_metadata(project)) == (
        "[console_scripts]\nmy-ops-bench = my_ops.bench:main\n\n"
        "[kernelpack.plugins]\nops = my_ops.plugin\n"
    )


def test_sdist_metadata_declares_requires_dist_dynamic(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", files=RICH_FILES)
    meta = _read_back(core_metadata(project, dynamic=["Requires-Dist"]).text())
    assert meta.dynamic == ["requires-dist"]
    assert meta.version == Version("1.2.3")


# --- bad [project]: one line naming the key --------------------------------------------------


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ('license = "Apache-2.0 AND No-Such-License"', "[project].license"),
        ('license = "MIT"\nlicense-files = ["LICENSE", "COPYING.md"]', "project.license-files"),
        ('authors = "Ada"', "project.authors"),
        ('authors = [{nick = "ada"}]', "project.authors[0]"),
        ('readme = {file = "NOPE.md", content-type = "text/markdown"}', "NOPE.md"),
        ("urls = {Homepage = 5}", "project.urls.Homepage"),
        ('dependencies = ["torch>>2"]', "project.dependencies[0]"),
    ],
)
def test_bad_project_table_is_one_line_naming_the_key(
    tmp_path: Path, change: str, key: str
) -> None:
    pyproject = f'[project]\nname = "my-ops"\nversion = "1"\n{change}\n[tool.kernelpack]\n'
    project = make_project(tmp_path / "p", pyproject, {"LICENSE": "x\n"})
    with pytest.raises(UsageError) as caught:
        core_metadata(project)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("p/pyproject.toml: ")
    assert key in message


def test_unicode_distribution_name_is_one_line_naming_the_key(tmp_path: Path) -> None:
    pyproject = (
        '[project]\nname = "kérnel-ops"\nversion = "1"\n[tool.kernelpack]\nmanifest = "my_ops"\n'
    )
    with pytest.raises(UsageError, match=r"project\.name.*kérnel-ops.*ASCII"):
        core_metadata(make_project(tmp_path / "p", pyproject))


def test_cli_build_with_bad_project_exits_2_writing_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pyproject = (
        '[project]\nname = "my-ops"\nversion = "1"\nlicense = "Nope-1.0"\n[tool.kernelpack]\n'
    )
    make_project(tmp_path / "p", pyproject)
    code = main(["build", str(tmp_path / "p"), "--wheel-dir", str(tmp_path / "dist")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "[project].license" in err and "Nope-1.0" in err
    assert not (tmp_path / "dist").exists()
    assert not (tmp_path / "p" / "build").exists()


# --- requires-python -------------------------------------------------------------------------


def test_requires_python_that_excludes_the_building_python_is_an_error(tmp_path: Path) -> None:
    pyproject = '[project]\nname = "my-ops"\nversion = "1"\nrequires-python = "~=3.12.0"\n'
    project = make_project(tmp_path / "p", pyproject + "[tool.kernelpack]\n")
    with pytest.raises(UsageError, match=r"requires-python = '~=3.12.0' excludes Python 3.11.4"):
        check_requires_python(project, (3, 11, 4))
    check_requires_python(project, (3, 12, 1))


def test_cli_build_refuses_an_excluded_python_before_anything_compiles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pyproject = '[project]\nname = "my-ops"\nversion = "1"\nrequires-python = ">=3.99"\n'
    make_project(tmp_path / "p", pyproject + "[tool.kernelpack]\n")
    code = main(["build", str(tmp_path / "p"), "--wheel-dir", str(tmp_path / "dist")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "requires-python = '>=3.99' excludes Python 3." in err
    assert not (tmp_path / "p" / "build").exists()
    assert not (tmp_path / "dist").exists()


# --- run-time requirements -------------------------------------------------------------------


def test_classic_tag_pins_the_exact_torch_release() -> None:
    assert str(torch_requirement(AbiTag.parse("cu130torch2.14.1"))) == "torch==2.14.1"


def test_exact_torch_pin_accepts_the_cuda_build_and_the_plain_release() -> None:
    pin = torch_requirement(AbiTag.parse("cu130torch2.14.1")).specifier
    assert pin.contains("2.14.1+cu130")
    assert pin.contains("2.14.1")
    assert not pin.contains("2.13.0")
    assert not pin.contains("2.14.2")


def test_stable_tag_needs_torch_from_its_target_up() -> None:
    assert str(torch_requirement(AbiTag.parse("cu130stable2.10"))) == "torch>=2.10"


def test_wheel_requires_the_runtime_torch_and_the_project_dependencies(tmp_path: Path) -> None:
    pyproject = (
        '[project]\nname = "my-ops"\nversion = "1"\n'
        'dependencies = ["kernelpack", "kernelpack-runtime>=0.1.1", "torch>=2.12", '
        '"numpy", "torch<3; python_version < \'3.12\'"]\n[tool.kernelpack]\n'
    )
    project = make_project(tmp_path / "p", pyproject)
    found = [str(r) for r in requirements(project, AbiTag.parse("cu130torch2.14.1"))]
    assert found == [
        "kernelpack-runtime<0.2,>=0.1,>=0.1.1",
        "torch==2.14.1,>=2.12",
        "numpy",
        'torch<3; python_version < "3.12"',
    ]


def test_torch_dependency_that_excludes_the_build_torch_is_an_error(tmp_path: Path) -> None:
    pyproject = '[project]\nname = "my-ops"\nversion = "1"\ndependencies = ["torch<2.12"]\n'
    project = make_project(tmp_path / "p", pyproject + "[tool.kernelpack]\n")
    with pytest.raises(UsageError, match=r"dependencies: torch<2.12 excludes torch 2.14.1"):
        requirements(project, AbiTag.parse("cu130torch2.14.1"))


def test_runtime_requirement_accepts_the_runtime_of_this_release() -> None:
    assert Requirement(RUNTIME_REQUIREMENT).specifier.contains(kernelpack_runtime.__version__)


def test_unicode_package_folder_without_pyproject_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    package = tmp_path / "ünï_ops"
    (package / "scale" / "csrc").mkdir(parents=True)
    (package / "scale" / "csrc" / "scale.cu").write_text("// x\n")
    (package / "kernels.toml").write_text(KERNELS)
    code = main(["build", str(package), "--wheel-dir", str(tmp_path / "dist")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "ünï_ops/kernels.toml: the package folder 'ünï_ops' gives the distribution name" in err
    assert not (tmp_path / "dist").exists()


# --- the PEP 517 hooks ---------------------------------------------------------------------------


def test_backend_refuses_an_excluded_python_before_planning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelpack import backend

    pyproject = '[project]\nname = "my-ops"\nversion = "1"\nrequires-python = ">=3.99"\n'
    make_project(tmp_path / "p", pyproject + "[tool.kernelpack]\n")
    monkeypatch.chdir(tmp_path / "p")
    with pytest.raises(UsageError, match="excludes Python 3"):
        backend.prepare_metadata_for_build_wheel(str(tmp_path / "meta"))
    with pytest.raises(UsageError, match="excludes Python 3"):
        backend.build_wheel(str(tmp_path / "dist"))
    assert not (tmp_path / "p" / "build").exists()
    assert not (tmp_path / "dist").exists()


@pytest.mark.parametrize(
    ("dependencies", "torch"), [('["torch>=2.10", "numpy"]', "torch>=2.10"), ("[]", "torch")]
)
def test_isolated_build_environment_asks_for_the_projects_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dependencies: str, torch: str
) -> None:
    import importlib.util

    from kernelpack import backend

    pyproject = f'[project]\nname = "my-ops"\nversion = "1"\ndependencies = {dependencies}\n'
    make_project(tmp_path / "p", pyproject + "[tool.kernelpack]\n")
    monkeypatch.chdir(tmp_path / "p")
    assert "torch" not in " ".join(backend.get_requires_for_build_wheel())  # torch is here
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    assert backend.get_requires_for_build_wheel() == ["kernelpack", "ninja>=1.11", torch]


def test_source_date_epoch_that_is_not_a_number_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelpack.backend.sdist import write_sdist

    project = make_project(tmp_path / "p", files=RICH_FILES)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(UsageError, match=r"SOURCE_DATE_EPOCH='yesterday': expected seconds"):
        write_sdist(project, tmp_path / "sdist")
    assert not (tmp_path / "sdist").exists()
