"""Property tests of the `build.toml` reader (kernel-builder projects), beside the manifest's.

Generated `build.toml` files, plausible and hostile (wrong types, unknown keys, paths that
leave the project, names longer than a file system takes, control and non-BMP characters,
arbitrary text), are either read or refused with one printable line per problem, quickly,
never with another exception. Example counts are CI-sized; raise them with
`KERNELPACK_FUZZ_EXAMPLES`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelpack.errors import KernelpackError, ManifestError
from kernelpack.project.locate import locate
from kernelpack.syntax import toml

EXAMPLES = Path(__file__).resolve().parents[1] / "foreign" / "hf-kernels" / "examples"

FUZZ = settings(
    max_examples=int(os.environ.get("KERNELPACK_FUZZ_EXAMPLES", "300")) // 2,
    deadline=None,  # timed below in CPU seconds: the machine running the tests may be busy
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def project() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="kp-buildtoml-") as tmp:
        root = Path(tmp) / "relu"
        shutil.copytree(EXAMPLES / "relu", root)
        yield root


_PATHS = st.sampled_from(
    [
        "relu_cuda/relu.cu",
        "torch-ext/torch_binding.cpp",
        "torch-ext/torch_binding.h",
        "relu_cuda/*.cu",
        "../outside.cu",
        "/etc/passwd",
        "~/x.cu",
        "missing.cu",
        "a" * 300 + ".cu",
        "x/" * 2100 + "y.cu",
        "relu_cuda/\u2028.cu",
        "relu_cuda/😀.cu",
        "relu_cuda/a b.cu",
        "relu_cuda/$(id).cu",
        "",
    ]
)
_SCALARS = st.one_of(
    st.text(max_size=12),
    st.integers(-5, 10**20),
    st.booleans(),
    st.floats(allow_nan=True),
    st.sampled_from(["cuda", "cpu", "metal", "rocm", "xpu", "torch", "9.0", "8.0;9.0a"]),
)
_VALUES = st.one_of(_SCALARS, st.lists(st.one_of(_PATHS, _SCALARS), max_size=4))
_KERNEL_KEYS = st.sampled_from(
    [
        "backend",
        "depends",
        "src",
        "include",
        "cxx-flags",
        "cuda-capabilities",
        "cuda-flags",
        "cuda-minver",
        "rocm-archs",
        "unknown-key",
    ]
)


@st.composite
def _kernel(draw: st.DrawFn) -> dict[str, Any]:
    table: dict[str, Any] = {
        "backend": draw(st.sampled_from(["cuda", "cpu", "metal", "rocm", "xpu", 5])),
        "src": draw(st.lists(_PATHS, min_size=1, max_size=3)),
    }
    for key in draw(st.lists(_KERNEL_KEYS, max_size=3)):
        table[key] = draw(_VALUES)
    return table


@st.composite
def build_tomls(draw: st.DrawFn) -> dict[str, Any]:
    # Every format: edition 5; no edition (v4, or v3 without license/version/framework);
    # `universal` and no `backends` (v2).
    general: dict[str, Any] = {
        "name": draw(st.sampled_from(["relu", "relu_2", "1x", "a b", "ü", "x" * 300])),
        "version": draw(st.sampled_from([1, 2, "1", None])),
        "edition": draw(st.sampled_from([5, 4, "5", None, None])),
        "backends": draw(
            st.one_of(
                st.none(), st.lists(st.sampled_from(["cuda", "cpu", "metal", "x"]), max_size=3)
            )
        ),
    }
    general = {key: value for key, value in general.items() if value is not None}
    if draw(st.booleans()):
        general["license"] = draw(st.text(max_size=10))
    if draw(st.booleans()):
        general["universal"] = draw(st.sampled_from([True, False, "yes"]))
    data: dict[str, Any] = {"general": general}
    framework = draw(st.sampled_from(["torch", "torch-noarch", "both", "none"]))
    if framework in ("torch", "both"):
        data["torch"] = {"src": draw(st.lists(_PATHS, max_size=3))}
        if draw(st.booleans()):
            data["torch"]["stable-abi"] = draw(
                st.sampled_from(["2.9", "2.10", "2", 2.9, {"cuda": "2.9"}, {"gpu": "2.10"}])
            )
    if framework in ("torch-noarch", "both"):
        data["torch-noarch"] = {}
    kernels = draw(st.dictionaries(st.sampled_from(["relu", "k2", "1bad", "a-b"]), _kernel()))
    if kernels:
        data["kernel"] = kernels
    return data


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(value), repr(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return toml.string(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(_value, value)) + "]"
    return toml.inline_table({str(k): str(v) for k, v in value.items()})


def _document(data: dict[str, Any]) -> str:
    out = []
    for section, table in data.items():
        if section == "kernel":
            for name, kernel in table.items():
                out.append(f"[kernel.{toml.key(name)}]")
                out += [f"{toml.key(k)} = {_value(v)}" for k, v in kernel.items()]
            continue
        out.append(f"[{toml.key(section)}]")
        out += [f"{toml.key(k)} = {_value(v)}" for k, v in table.items()]
    return "\n".join(out) + "\n"


def _read(path: Path) -> list[str]:
    """The problems reading `path` reports, one line each (none: it was read)."""
    start = time.process_time()
    try:
        locate(path).load_manifest(allow_missing_sources=True)
    except ManifestError as exc:
        lines = exc.lines(1000)
    except KernelpackError as exc:
        lines = [str(exc)]
    else:
        lines = []
    assert time.process_time() - start < 2.0
    return lines


@FUZZ
@given(build_tomls())
def test_generated_build_toml_is_read_or_refused_in_printable_lines(
    project: Path, data: dict[str, Any]
) -> None:
    path = project / "build.toml"
    path.write_text(_document(data), encoding="utf-8")
    for line in _read(path):
        assert line.isprintable() and "\n" not in line, line


_TOML_BITS = st.sampled_from(
    [
        "[general]",
        "[torch]",
        "[torch-noarch]",
        "[kernel.relu]",
        "[[kernel]]",
        'name = "relu"',
        "edition = 5",
        "src = ",
        '["relu_cuda/relu.cu"]',
        "backend = ",
        '"cuda"',
        "{",
        "}",
        "[",
        "]",
        "=",
        ",",
        "\n",
        '"',
        "'",
        "9" * 4400,
        "\\",
        "\x00",
        "\t",
        "😀",
        "\u2028",
        "inf",
    ]
)


@FUZZ
@given(st.lists(st.one_of(_TOML_BITS, st.text(max_size=6)), max_size=40).map("".join))
def test_arbitrary_build_toml_text_gets_an_answer_or_printable_lines(
    project: Path, text: str
) -> None:
    path = project / "build.toml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    for line in _read(path):
        assert line.isprintable(), line
