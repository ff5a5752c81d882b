"""`kernelpack_runtime.arch.Arch`: manifest arch strings, nvcc names, and where code runs."""

from __future__ import annotations

import pytest

from kernelpack_runtime.arch import KNOWN_ARCHS, Arch, InvalidArch


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8.0", Arch(8, 0)),
        ("9.0a", Arch(9, 0, "a")),
        ("10.0f", Arch(10, 0, "f")),
        ("12.1a", Arch(12, 1, "a")),
        (" 7.5 ", Arch(7, 5)),
    ],
)
def test_parses_manifest_spelling(text: str, expected: Arch) -> None:
    assert Arch.parse(text) == expected


@pytest.mark.parametrize("text", ["9.5", "8.0a", "9.0f", "13.0", "9", "9.0b", "", "nine"])
def test_rejects_what_nvidia_never_shipped(text: str) -> None:
    with pytest.raises(ValueError, match="is not a CUDA arch"):
        Arch.parse(text)


def test_error_quotes_input_and_known_range() -> None:
    with pytest.raises(ValueError) as excinfo:
        Arch.parse("9.5")
    assert str(excinfo.value) == '"9.5" is not a CUDA arch (known: 5.0 … 12.1f)'


@pytest.mark.parametrize(
    ("text", "hint"),
    [("sm90", "9.0"), ("sm_90a", "9.0a"), ("compute_100f", "10.0f"), ("SM_120", "12.0")],
)
def test_nvcc_names_get_the_manifest_spelling_as_hint(text: str, hint: str) -> None:
    with pytest.raises(ValueError, match=f'write "{hint}"'):
        Arch.parse(text)


def test_nvcc_name_of_unknown_arch_gets_no_hint() -> None:
    with pytest.raises(ValueError) as excinfo:
        Arch.parse("sm_95")
    assert "write" not in str(excinfo.value)


def test_str_round_trips_every_known_arch() -> None:
    for arch in KNOWN_ARCHS:
        assert Arch.parse(str(arch)) == arch


def test_nvcc_target_names() -> None:
    arch = Arch(9, 0, "a")
    assert arch.sm == "sm_90a"
    assert arch.compute == "compute_90a"
    assert arch.gencode() == "-gencode=arch=compute_90a,code=sm_90a"
    assert arch.ptx_gencode() == "-gencode=arch=compute_90a,code=compute_90a"


def test_archs_sort_by_capability() -> None:
    assert sorted([Arch(10, 0, "a"), Arch(8, 0), Arch(9, 0, "a"), Arch(9, 0)]) == [
        Arch(8, 0),
        Arch(9, 0),
        Arch(9, 0, "a"),
        Arch(10, 0, "a"),
    ]


def test_arch_specific_runs_only_on_its_exact_capability() -> None:
    arch = Arch(9, 0, "a")
    assert arch.runs_on((9, 0))
    assert not arch.runs_on((10, 0))
    assert not arch.runs_on((10, 0), ptx=True)


def test_tcgen05_kernel_for_10_0a_does_not_run_on_h200() -> None:
    assert not Arch(10, 0, "a").runs_on((9, 0))


def test_plain_sass_runs_on_later_minor_of_same_major() -> None:
    arch = Arch(8, 0)
    assert arch.runs_on((8, 6))
    assert not arch.runs_on((9, 0))


def test_plain_arch_with_ptx_runs_on_any_later_device() -> None:
    assert Arch(8, 0).runs_on((9, 0), ptx=True)
    assert not Arch(9, 0).runs_on((8, 0), ptx=True)


def test_family_runs_on_same_major_equal_or_later_minor() -> None:
    arch = Arch(10, 0, "f")
    assert arch.runs_on((10, 3))
    assert not arch.runs_on((12, 0))


def test_a_bad_arch_raises_invalid_arch_a_value_error() -> None:
    with pytest.raises(InvalidArch, match=r'"9\.5" is not a CUDA arch'):
        Arch.parse("9.5")
    assert issubclass(InvalidArch, ValueError)
