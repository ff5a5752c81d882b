"""Every `build.toml` format kernel-builder has read, each by its own reader, into one model:
edition 5, v4 (no edition), v3 (optional license and version, no framework table: Python
only) and v2 (`universal`, no `backends`); the older ones with one note line."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.projects import write_tree
from packaging.version import Version

from kernelpack.errors import ManifestError
from kernelpack.project import buildtoml
from kernelpack.project.buildtoml.model import Noarch, Torch

# Every test runs in its tmp_path (messages name files relative to it).
pytestmark = pytest.mark.usefixtures("in_tmp")

FILES = {
    "torch-ext/torch_binding.cpp": "// binding\n",
    "torch-ext/demo_kernel/__init__.py": "",
    "demo/demo.cu": "// demo\n",
}

KERNEL = """
[kernel.demo]
backend = "cuda"
depends = ["torch"]
src = ["demo/demo.cu"]
cuda-capabilities = ["9.0a"]
"""

EDITION_5 = (
    """\
[general]
name = "demo-kernel"
version = 3
edition = 5
license = "MIT"
backends = ["cuda"]

[general.cuda]
minver = "12.8"
python-depends = ["nvidia-cutlass-dsl"]

[torch]
src = ["torch-ext/torch_binding.cpp"]

[torch.stable-abi]
cuda = "2.9"
"""
    + KERNEL
)

V4 = (
    """\
[general]
name = "demo-kernel"
version = 3
license = "MIT"
backends = ["cuda"]
python-depends = ["einops"]

[general.cuda]
minver = "12.8"

[torch]
src = ["torch-ext/torch_binding.cpp"]
stable-abi = "2.9"
"""
    + KERNEL
)

V3 = (
    """\
[general]
name = "demo-kernel"
backends = ["cuda"]

[torch]
src = ["torch-ext/torch_binding.cpp"]
"""
    + KERNEL
)

V3_PYTHON_ONLY = """\
[general]
name = "demo-kernel"
version = 2
backends = ["cuda", "cpu"]
"""

V2 = (
    """\
[general]
name = "demo-kernel"
cuda-minver = "12.8"

[torch]
src = ["torch-ext/torch_binding.cpp"]
"""
    + KERNEL
)

V2_UNIVERSAL = """\
[general]
name = "demo-kernel"
universal = true
python-depends = ["einops"]
"""


def _write(root: Path, text: str) -> Path:
    write_tree(root, {**FILES, "build.toml": text})
    return root / "build.toml"


@pytest.mark.parametrize(
    ("text", "fmt"),
    [(EDITION_5, "edition 5"), (V4, "v4"), (V3, "v3"), (V2, "v2")],
)
def test_each_format_is_read_into_the_same_model(tmp_path: Path, text: str, fmt: str) -> None:
    project = buildtoml.read(_write(tmp_path, text))
    assert project.format == fmt
    assert project.name == "demo-kernel" and project.python_name == "demo_kernel"
    assert isinstance(project.framework, Torch)
    assert project.framework.src == ("torch-ext/torch_binding.cpp",)
    (kernel,) = project.kernels
    assert (kernel.name, kernel.backend, kernel.cuda_capabilities) == ("demo", "cuda", ("9.0a",))
    assert project.backends == ("cuda",)
    library = buildtoml.load(tmp_path / "build.toml").kernel(buildtoml.KERNEL)
    assert [str(a) for a in library.parts[0].arch] == ["9.0a"]


def test_formats_differ_where_kernel_builder_differs(tmp_path: Path) -> None:
    five = buildtoml.read(_write(tmp_path / "a", EDITION_5))
    four = buildtoml.read(_write(tmp_path / "b", V4))
    three = buildtoml.read(_write(tmp_path / "c", V3))
    two = buildtoml.read(_write(tmp_path / "d", V2))
    assert (five.version, four.version, three.version, two.version) == (3, 3, 1, 1)
    assert (five.license, four.license, three.license) == ("MIT", "MIT", None)
    assert five.cuda_minver == four.cuda_minver == two.cuda_minver == Version("12.8")
    assert isinstance(five.framework, Torch) and isinstance(four.framework, Torch)
    # edition 5: a per-backend table; v4: one target for every backend; v3: none
    assert five.framework.stable_abi == {"cuda": Version("2.9")}
    assert four.framework.stable_abi["cuda"] == four.framework.stable_abi["cpu"] == Version("2.9")
    assert isinstance(three.framework, Torch) and three.framework.stable_abi == {}
    assert five.cuda_python_depends == ("nvidia-cutlass-dsl",)
    assert four.python_depends == ("einops",)


def test_stable_abi_2_9_is_a_target_in_both_forms(tmp_path: Path) -> None:
    for folder, text in (("five", EDITION_5), ("four", V4)):
        library = buildtoml.load(_write(tmp_path / folder, text)).kernel(buildtoml.KERNEL)
        assert library.abi == "stable" and library.stable_target == Version("2.9")


def test_older_formats_are_read_with_one_note_and_edition_5_without(tmp_path: Path) -> None:
    assert buildtoml.load(_write(tmp_path / "five", EDITION_5)).notes == ()
    for folder, text, fmt in (("four", V4, "v4"), ("three", V3, "v3"), ("two", V2, "v2")):
        (note,) = buildtoml.load(_write(tmp_path / folder, text)).notes
        assert "\n" not in note
        assert f"build.toml is in the {fmt} format, read as edition 5" in note


def test_a_v3_file_without_a_framework_is_python_only(tmp_path: Path) -> None:
    project = buildtoml.read(_write(tmp_path, V3_PYTHON_ONLY))
    assert project.format == "v3" and isinstance(project.framework, Noarch)
    manifest = buildtoml.load(tmp_path / "build.toml")
    assert manifest.kernels == () and "_ops.py" in manifest.generated


def test_a_universal_v2_file_is_python_only_for_every_backend(tmp_path: Path) -> None:
    project = buildtoml.read(_write(tmp_path, V2_UNIVERSAL))
    assert project.format == "v2" and isinstance(project.framework, Noarch)
    assert {"cuda", "cpu", "metal"} <= set(project.backends)
    assert buildtoml.requirements(project) == ("einops",)


def _error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ManifestError) as excinfo:
        buildtoml.load(_write(tmp_path, text))
    message = str(excinfo.value)
    assert "\n" not in message and message.startswith("build.toml: ")
    return message


@pytest.mark.parametrize(
    ("text", "edit", "fragment"),
    [
        # edition 5 only: kernel-depends; a newer edition needs a newer kernelpack
        (EDITION_5, ("edition = 5", "edition = 6"), "[general].edition: got an integer (6)"),
        # v4: stable-abi is one version, never a per-backend table
        (V4, ('stable-abi = "2.9"', '[torch.stable-abi]\ncuda = "2.9"'), "[torch].stable-abi"),
        (V4, ('license = "MIT"', 'license = "MIT"\nkernel-depends = []'), "[general]"),
        # v3: no stable-abi, no cxx-flags in [torch]; no source in [general]
        (V3, ("[torch]\n", '[torch]\ncxx-flags = ["-O2"]\n'), "[torch].cxx-flags: unknown key"),
        (V3, ('name = "demo-kernel"', 'name = "demo-kernel"\nsource = "x"'), "[general].source"),
        # v2: no backends key, so a typo of its own keys is reported there
        (V2, ("cuda-minver", "cuda-minimum"), "[general].cuda-minimum: unknown key"),
        (V2_UNIVERSAL, ('"einops"', '"numpy"'), "[general].python-depends: unknown dependency"),
        # every format: the kernel tables
        (V3, ('backend = "cuda"', 'backend = "vulkan"'), "[kernel.demo].backend: unknown backend"),
        (
            V4,
            ('"9.0a"', '"nine"'),
            '[kernel.demo].cuda-capabilities: "nine" is not a CUDA capability',
        ),
        (V4, ('["einops"]', '["numpy"]'), "[general].python-depends: unknown dependency"),
    ],
)
def test_each_formats_errors_are_one_line_naming_table_and_key(
    tmp_path: Path, text: str, edit: tuple[str, str], fragment: str
) -> None:
    assert edit[0] in text
    assert fragment in _error(tmp_path, text.replace(*edit))
