"""`kernelpack.project.manifest.load`: docs/manifest.md's `kernels.toml`; one-line errors for
bad input."""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from fakes.projects import sources
from packaging.version import Version

from kernelpack.errors import ManifestError
from kernelpack.project.manifest import ANY_PLATFORM, KernelSpec, Manifest, load
from kernelpack.project.settings import Settings
from kernelpack_runtime.arch import Arch

SOURCES = ("rmsnorm/csrc/rmsnorm.cu", "rmsnorm/csrc/binding.cpp", "rmsnorm/csrc/rmsnorm.cuh")

GOOD = """\
[rmsnorm]
sources = ["csrc/rmsnorm.cu", "csrc/binding.cpp"]
include-dirs = ["csrc"]
arch = "9.0a"
"""


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An `llm_ops` package folder with rmsnorm's sources, the working folder its parent."""
    monkeypatch.chdir(tmp_path)
    return sources(tmp_path / "llm_ops", SOURCES, "// source\n")


def write(package: Path, text: str) -> Path:
    manifest = package / "kernels.toml"
    manifest.write_text(textwrap.dedent(text))
    return manifest


def load_text(package: Path, text: str, **kwargs: object) -> Manifest:
    return load(write(package, text), **kwargs)  # type: ignore[arg-type]


def only(manifest: Manifest) -> KernelSpec:
    (spec,) = manifest.kernels
    return spec


# --- good input -------------------------------------------------------------------------


def test_seed_manifest_loads_unchanged(package: Path) -> None:
    (package / "flash_moe" / "csrc").mkdir(parents=True)
    for name in ("flash_moe.cu", "binding.cpp"):
        (package / "flash_moe" / "csrc" / name).write_text("// x\n")
    seed = """\
    [flash_moe]
    description = "Fused MoE forward (bf16 + mxfp8) on Blackwell"
    sources = ["csrc/flash_moe.cu", "csrc/binding.cpp"]
    include-dirs = ["csrc"]
    arch = "10.0a"
    cxx-std = 17
    cxx-flags = ["-O3"]
    nvcc-flags = ["--use_fast_math"]
    """
    spec = only(load_text(package, seed))
    assert spec.name == "flash_moe"
    assert spec.arch == {ANY_PLATFORM: (Arch(10, 0, "a"),)}
    assert spec.cxx_std == 17
    assert spec.include_dirs == (package / "flash_moe" / "csrc",)
    assert spec.sources == (
        package / "flash_moe" / "csrc" / "binding.cpp",
        package / "flash_moe" / "csrc" / "flash_moe.cu",
    )
    assert spec.cxx_flags == ("-O3",)
    assert spec.nvcc_flags == ("--use_fast_math",)


def test_manifest_names_package_from_its_folder(package: Path) -> None:
    manifest = load_text(package, GOOD)
    assert manifest.package == "llm_ops"
    assert manifest.package_dir == package
    assert manifest.path == package / "kernels.toml"
    assert manifest.names == ("rmsnorm",)


def test_defaults_follow_docs(package: Path) -> None:
    spec = only(load_text(package, GOOD))
    assert spec.namespace == "llm_ops_rmsnorm"
    assert spec.abi == "torch"
    assert spec.stable_target == Version("2.10")
    assert spec.ptx is False
    assert spec.cxx_std is None
    assert spec.platforms is None
    assert spec.min_cuda is None
    assert spec.depends == ()
    assert spec.defines == {}
    assert spec.libraries == ()
    assert spec.missing_sources is None
    assert spec.folder == package / "rmsnorm"


def test_every_documented_key_is_read(package: Path) -> None:
    spec = only(
        load_text(
            package,
            """\
            [rmsnorm]
            description = "RMSNorm with fused residual add"
            ops = "my_ns"
            sources = ["csrc/rmsnorm.cu"]
            arch = ["9.0a", "8.0"]
            cxx-std = 20
            abi = "stable"
            stable-target = "2.11"
            ptx = true
            min-cuda = "12.8"
            platforms = ["x86_64"]
            depends = ["cutlass"]
            defines = { BLOCK_M = "128" }
            libraries = ["cublas"]
            """,
        )
    )
    assert spec.description == "RMSNorm with fused residual add"
    assert spec.namespace == "my_ns"
    assert spec.cxx_std == 20
    assert spec.abi == "stable"
    assert spec.stable_target == Version("2.11")
    assert spec.ptx is True
    assert spec.min_cuda == Version("12.8")
    assert spec.platforms == ("x86_64",)
    assert spec.depends == ("cutlass",)
    assert spec.defines == {"BLOCK_M": "128"}
    assert spec.libraries == ("cublas",)


def test_arch_list_is_sorted_and_deduplicated(package: Path) -> None:
    spec = only(load_text(package, GOOD.replace('"9.0a"', '["9.0a", "8.0", "9.0a"]')))
    assert spec.archs_for("x86_64") == (Arch(8, 0), Arch(9, 0, "a"))


def test_per_platform_arch_table(package: Path) -> None:
    text = GOOD.replace('"9.0a"', '{ x86_64 = ["8.0", "9.0a"], aarch64 = "10.0a" }')
    spec = only(load_text(package, text))
    assert spec.archs_for("x86_64") == (Arch(8, 0), Arch(9, 0, "a"))
    assert spec.archs_for("aarch64") == (Arch(10, 0, "a"),)


def test_arch_table_without_a_platform_builds_nothing_there(package: Path) -> None:
    spec = only(load_text(package, GOOD.replace('"9.0a"', '{ aarch64 = "10.0a" }')))
    assert spec.archs_for("x86_64") is None


def test_globs_are_expanded_sorted_and_deduplicated(package: Path) -> None:
    text = GOOD.replace(
        '["csrc/rmsnorm.cu", "csrc/binding.cpp"]', '["csrc/*.cu", "csrc/*", "csrc/rmsnorm.cu"]'
    )
    spec = only(load_text(package, text))
    csrc = package / "rmsnorm" / "csrc"
    assert spec.sources == (csrc / "binding.cpp", csrc / "rmsnorm.cu", csrc / "rmsnorm.cuh")


def test_recursive_glob(package: Path) -> None:
    (package / "rmsnorm" / "csrc" / "sub").mkdir()
    (package / "rmsnorm" / "csrc" / "sub" / "deep.cu").write_text("// x\n")
    spec = only(load_text(package, GOOD.replace('"csrc/binding.cpp"', '"csrc/**/*.cu"')))
    assert package / "rmsnorm" / "csrc" / "sub" / "deep.cu" in spec.sources


def test_sources_may_be_shared_from_elsewhere_in_the_package(package: Path) -> None:
    (package / "common").mkdir()
    (package / "common" / "util.cu").write_text("// x\n")
    spec = only(load_text(package, GOOD.replace('"csrc/binding.cpp"', '"../common/util.cu"')))
    assert package / "common" / "util.cu" in spec.sources


def test_symlink_inside_the_package_is_allowed(package: Path) -> None:
    (package / "rmsnorm" / "csrc" / "alias.cu").symlink_to(
        package / "rmsnorm" / "csrc" / "rmsnorm.cu"
    )
    spec = only(load_text(package, GOOD.replace('"csrc/binding.cpp"', '"csrc/alias.cu"')))
    assert package / "rmsnorm" / "csrc" / "alias.cu" in spec.sources


def test_defines_become_strings(package: Path) -> None:
    spec = only(load_text(package, GOOD + 'defines = { A = "x", B = 128, C = true, D = false }\n'))
    assert spec.defines == {"A": "x", "B": "128", "C": "1", "D": "0"}


def test_settings_supply_default_arch_and_abi(package: Path) -> None:
    settings = Settings(abi="stable", arch={ANY_PLATFORM: (Arch(9, 0, "a"),)})
    spec = only(load_text(package, GOOD.replace('arch = "9.0a"\n', ""), settings=settings))
    assert spec.arch == {ANY_PLATFORM: (Arch(9, 0, "a"),)}
    assert spec.abi == "stable"


def test_kernel_arch_overrides_settings_default(package: Path) -> None:
    settings = Settings(arch={ANY_PLATFORM: (Arch(8, 0),)})
    spec = only(load_text(package, GOOD, settings=settings))
    assert spec.arch == {ANY_PLATFORM: (Arch(9, 0, "a"),)}


def test_settings_deps_are_known_to_depends(package: Path) -> None:
    settings = Settings(deps={"mylib": "third_party/mylib/include"})
    spec = only(load_text(package, GOOD + 'depends = ["mylib"]\n', settings=settings))
    assert spec.depends == ("mylib",)


def test_allow_missing_sources_marks_the_kernel(package: Path) -> None:
    text = GOOD.replace('"csrc/binding.cpp"', '"csrc/absent.cu"')
    spec = only(load_text(package, text, allow_missing_sources=True))
    assert spec.sources == ()
    assert spec.missing_sources is not None
    assert "csrc/absent.cu" in spec.missing_sources
    assert "\n" not in spec.missing_sources


def test_allow_missing_sources_covers_an_empty_submodule_folder(package: Path) -> None:
    (package / "flash_moe").mkdir()
    text = GOOD + '[flash_moe]\nsources = ["csrc/*.cu"]\ninclude-dirs = ["csrc"]\narch = "10.0a"\n'
    manifest = load_text(package, text, allow_missing_sources=True)
    assert manifest.kernel("flash_moe").missing_sources is not None
    assert manifest.kernel("rmsnorm").missing_sources is None


def test_allow_missing_sources_still_rejects_escapes(package: Path) -> None:
    text = GOOD.replace('"csrc/binding.cpp"', '"../../outside.cu"')
    with pytest.raises(ManifestError, match=r"\[rmsnorm\]\.sources: .* outside the package"):
        load_text(package, text, allow_missing_sources=True)


def test_results_are_frozen(package: Path) -> None:
    manifest = load_text(package, GOOD)
    with pytest.raises(dataclasses.FrozenInstanceError):
        manifest.kernels[0].abi = "stable"  # type: ignore[misc]


def test_kernels_keep_manifest_order(package: Path) -> None:
    (package / "a_kernel").mkdir()
    (package / "a_kernel" / "k.cu").write_text("// x\n")
    text = GOOD + '[a_kernel]\nsources = ["k.cu"]\narch = "8.0"\n'
    assert load_text(package, text).names == ("rmsnorm", "a_kernel")


def test_error_names_file_relative_to_working_folder(package: Path) -> None:
    with pytest.raises(ManifestError) as excinfo:
        load_text(package, GOOD.replace('"9.0a"', '"9.5"'))
    assert str(excinfo.value) == (
        'llm_ops/kernels.toml: [rmsnorm].arch: "9.5" is not a CUDA arch (known: 5.0 … 12.1f)'
    )


def test_package_folder_must_be_an_import_name(tmp_path: Path) -> None:
    folder = tmp_path / "llm-ops"
    (folder / "rmsnorm").mkdir(parents=True)
    (folder / "rmsnorm" / "k.cu").write_text("// x\n")
    manifest = write(folder, '[rmsnorm]\nsources = ["k.cu"]\narch = "9.0a"\n')
    with pytest.raises(ManifestError, match=r"llm-ops.* not a Python import name"):
        load(manifest)


# --- bad input: one line naming file, kernel and key ------------------------------------

Setup = Callable[[Path], None]


def _symlink_out(package: Path) -> None:
    outside = package.parent / "outside.cu"
    outside.write_text("// x\n")
    (package / "rmsnorm" / "csrc" / "evil.cu").symlink_to(outside)


def _symlink_dir_out(package: Path) -> None:
    outside = package.parent / "outside_include"
    outside.mkdir()
    (package / "rmsnorm" / "csrc" / "inc").symlink_to(outside)


def _no_setup(package: Path) -> None:
    return None


def _kernel(body: str, name: str = "rmsnorm") -> str:
    """A valid rmsnorm table with `body` lines appended (later keys may replace earlier ones)."""
    return f'[{name}]\nsources = ["csrc/rmsnorm.cu"]\n' + body


_ARCH = 'arch = "9.0a"\n'

# (id, manifest text, where "[kernel].key" or "[kernel]" or None, fragment, setup)
BAD: list[tuple[str, str, str | None, str, Setup]] = [
    ("toml-syntax", _kernel('arch = "9.0a\n'), "[rmsnorm].arch", "line 3, column", _no_setup),
    ("toml-syntax-bare-word", _kernel("arch = nine\n"), "[rmsnorm].arch", "line 3", _no_setup),
    ("duplicate-key", _kernel(_ARCH + _ARCH), "[rmsnorm].arch", "duplicate key", _no_setup),
    ("duplicate-table", _kernel(_ARCH) + _kernel(_ARCH), "[rmsnorm]", "duplicate", _no_setup),
    (
        "unknown-key-close",
        _kernel(_ARCH + 'include_dirs = ["csrc"]\n'),
        "[rmsnorm].include_dirs",
        'did you mean "include-dirs"?',
        _no_setup,
    ),
    ("unknown-key", _kernel(_ARCH + "colour = 1\n"), "[rmsnorm].colour", "unknown key", _no_setup),
    ("kernel-not-a-table", "rmsnorm = 3\n", "[rmsnorm]", "got an integer (3)", _no_setup),
    ("kernel-name-dash", _kernel(_ARCH, '"rms-norm"'), "[rms-norm]", "not a Python", _no_setup),
    ("kernel-name-digit", _kernel(_ARCH, '"2d"'), "[2d]", "not a Python identifier", _no_setup),
    ("kernel-name-keyword", _kernel(_ARCH, "class"), "[class]", "Python keyword", _no_setup),
    ("kernel-name-softkw", _kernel(_ARCH, "match"), "[match]", "Python keyword", _no_setup),
    ("kernel-name-reserved", _kernel(_ARCH, "load"), "[load]", "shadows", _no_setup),
    ("empty-manifest", "", None, "declares no kernel", _no_setup),
    ("sources-missing", "[rmsnorm]\n" + _ARCH, "[rmsnorm].sources", "is missing", _no_setup),
    ("sources-empty", "[rmsnorm]\nsources = []\n" + _ARCH, "[rmsnorm].sources", "empty", _no_setup),
    (
        "sources-string",
        '[rmsnorm]\nsources = "csrc/rmsnorm.cu"\n' + _ARCH,
        "[rmsnorm].sources",
        "got a string",
        _no_setup,
    ),
    (
        "sources-int-item",
        "[rmsnorm]\nsources = [1]\n" + _ARCH,
        "[rmsnorm].sources",
        "integer",
        _no_setup,
    ),
    (
        "glob-matches-nothing",
        '[rmsnorm]\nsources = ["csrc/*.cxx"]\n' + _ARCH,
        "[rmsnorm].sources",
        '"csrc/*.cxx" matches no file',
        _no_setup,
    ),
    (
        "missing-file",
        '[rmsnorm]\nsources = ["csrc/gone.cu"]\n' + _ARCH,
        "[rmsnorm].sources",
        '"csrc/gone.cu" does not exist',
        _no_setup,
    ),
    (
        "source-is-folder",
        '[rmsnorm]\nsources = ["csrc"]\n' + _ARCH,
        "[rmsnorm].sources",
        "not a file",
        _no_setup,
    ),
    (
        "dotdot-escape",
        '[rmsnorm]\nsources = ["../../outside.cu"]\n' + _ARCH,
        "[rmsnorm].sources",
        "outside the package",
        _no_setup,
    ),
    (
        "absolute-path",
        '[rmsnorm]\nsources = ["/etc/hostname"]\n' + _ARCH,
        "[rmsnorm].sources",
        "absolute path",
        _no_setup,
    ),
    (
        "symlink-escape",
        '[rmsnorm]\nsources = ["csrc/evil.cu"]\n' + _ARCH,
        "[rmsnorm].sources",
        "resolves outside the package",
        _symlink_out,
    ),
    (
        "symlink-escape-by-glob",
        '[rmsnorm]\nsources = ["csrc/*.cu"]\n' + _ARCH,
        "[rmsnorm].sources",
        "resolves outside the package",
        _symlink_out,
    ),
    (
        "include-dirs-escape",
        _kernel(_ARCH + 'include-dirs = ["../../.."]\n'),
        "[rmsnorm].include-dirs",
        "outside the package",
        _no_setup,
    ),
    (
        "include-dirs-symlink-escape",
        _kernel(_ARCH + 'include-dirs = ["csrc/inc"]\n'),
        "[rmsnorm].include-dirs",
        "resolves outside the package",
        _symlink_dir_out,
    ),
    (
        "include-dirs-absolute",
        _kernel(_ARCH + 'include-dirs = ["/usr/include"]\n'),
        "[rmsnorm].include-dirs",
        "absolute path",
        _no_setup,
    ),
    (
        "include-dirs-missing",
        _kernel(_ARCH + 'include-dirs = ["nowhere"]\n'),
        "[rmsnorm].include-dirs",
        "does not exist",
        _no_setup,
    ),
    (
        "arch-9.5",
        _kernel('arch = "9.5"\n'),
        "[rmsnorm].arch",
        '"9.5" is not a CUDA arch',
        _no_setup,
    ),
    ("arch-sm90", _kernel('arch = "sm90"\n'), "[rmsnorm].arch", 'write "9.0"', _no_setup),
    (
        "arch-sm_90a-in-list",
        _kernel('arch = ["8.0", "sm_90a"]\n'),
        "[rmsnorm].arch",
        'write "9.0a"',
        _no_setup,
    ),
    ("arch-float", _kernel("arch = 9.0\n"), "[rmsnorm].arch", "got a float", _no_setup),
    ("arch-empty-list", _kernel("arch = []\n"), "[rmsnorm].arch", "is empty", _no_setup),
    ("arch-missing", _kernel(""), "[rmsnorm].arch", "is missing", _no_setup),
    (
        "arch-table-unknown-platform",
        _kernel('arch = { x86 = "9.0a" }\n'),
        "[rmsnorm].arch.x86",
        'did you mean "x86_64"?',
        _no_setup,
    ),
    (
        "arch-table-bad-arch",
        _kernel('arch = { aarch64 = ["10.0a", "10.2"] }\n'),
        "[rmsnorm].arch.aarch64",
        '"10.2" is not a CUDA arch',
        _no_setup,
    ),
    ("cxx-std-14", _kernel(_ARCH + "cxx-std = 14\n"), "[rmsnorm].cxx-std", "17, 20, 23", _no_setup),
    (
        "cxx-std-string",
        _kernel(_ARCH + 'cxx-std = "17"\n'),
        "[rmsnorm].cxx-std",
        "string",
        _no_setup,
    ),
    (
        "cxx-std-bool",
        _kernel(_ARCH + "cxx-std = true\n"),
        "[rmsnorm].cxx-std",
        "boolean",
        _no_setup,
    ),
    (
        "abi-classic",
        _kernel(_ARCH + 'abi = "classic"\n'),
        "[rmsnorm].abi",
        '"torch", "stable"',
        _no_setup,
    ),
    (
        "stable-target-2.9",
        _kernel(_ARCH + 'stable-target = "2.9"\n'),
        "[rmsnorm].stable-target",
        '"2.10" or later',
        _no_setup,
    ),
    (
        "stable-target-float",
        _kernel(_ARCH + "stable-target = 2.10\n"),
        "[rmsnorm].stable-target",
        "got a float (2.1)",
        _no_setup,
    ),
    (
        "stable-target-not-a-version",
        _kernel(_ARCH + 'stable-target = "latest"\n'),
        "[rmsnorm].stable-target",
        "is not a version",
        _no_setup,
    ),
    (
        "min-cuda-word",
        _kernel(_ARCH + 'min-cuda = "twelve"\n'),
        "[rmsnorm].min-cuda",
        "not a version",
        _no_setup,
    ),
    (
        "min-cuda-float",
        _kernel(_ARCH + "min-cuda = 12.8\n"),
        "[rmsnorm].min-cuda",
        "got a float",
        _no_setup,
    ),
    (
        "platforms-unknown",
        _kernel(_ARCH + 'platforms = ["x86"]\n'),
        "[rmsnorm].platforms",
        'unknown platform "x86"',
        _no_setup,
    ),
    (
        "platforms-string",
        _kernel(_ARCH + 'platforms = "x86_64"\n'),
        "[rmsnorm].platforms",
        "got a string",
        _no_setup,
    ),
    (
        "platforms-empty",
        _kernel(_ARCH + "platforms = []\n"),
        "[rmsnorm].platforms",
        "is empty",
        _no_setup,
    ),
    (
        "depends-unknown",
        _kernel(_ARCH + 'depends = ["cutlas"]\n'),
        "[rmsnorm].depends",
        'did you mean "cutlass"?',
        _no_setup,
    ),
    (
        "defines-array",
        _kernel(_ARCH + 'defines = ["A"]\n'),
        "[rmsnorm].defines",
        "got an array",
        _no_setup,
    ),
    (
        "defines-float",
        _kernel(_ARCH + "defines = { A = 1.5 }\n"),
        "[rmsnorm].defines.A",
        "got a float",
        _no_setup,
    ),
    (
        "defines-bad-macro",
        _kernel(_ARCH + 'defines = { "1A" = 1 }\n'),
        "[rmsnorm].defines.1A",
        "macro name",
        _no_setup,
    ),
    ("ptx-string", _kernel(_ARCH + 'ptx = "yes"\n'), "[rmsnorm].ptx", "true or false", _no_setup),
    (
        "ops-not-identifier",
        _kernel(_ARCH + 'ops = "llm-ops"\n'),
        "[rmsnorm].ops",
        "not an identifier",
        _no_setup,
    ),
    (
        "libraries-string",
        _kernel(_ARCH + 'libraries = "cublas"\n'),
        "[rmsnorm].libraries",
        "got a string",
        _no_setup,
    ),
    (
        "libraries-bad-name",
        _kernel(_ARCH + 'libraries = ["-lcublas x"]\n'),
        "[rmsnorm].libraries",
        "not a library name",
        _no_setup,
    ),
    (
        "nvcc-flags-string",
        _kernel(_ARCH + 'nvcc-flags = "-O3"\n'),
        "[rmsnorm].nvcc-flags",
        "got a string",
        _no_setup,
    ),
    (
        "description-int",
        _kernel(_ARCH + "description = 1\n"),
        "[rmsnorm].description",
        "integer",
        _no_setup,
    ),
]


@pytest.mark.parametrize(
    ("text", "where", "fragment", "setup"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD],
)
def test_bad_manifest_is_one_line_naming_file_kernel_and_key(
    package: Path, text: str, where: str | None, fragment: str, setup: Setup
) -> None:
    setup(package)
    with pytest.raises(ManifestError) as excinfo:
        load_text(package, text)
    message = str(excinfo.value)
    assert "\n" not in message
    prefix = "llm_ops/kernels.toml: " + (f"{where}: " if where else "")
    assert message.startswith(prefix), message
    assert fragment in message, message


def test_there_are_at_least_25_distinct_bad_inputs() -> None:
    assert len({case[1] for case in BAD}) >= 25
