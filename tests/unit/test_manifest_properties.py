"""Property-based tests (Hypothesis): a generated manifest is accepted, or gets exactly one
error line per problem put into it, in file order, under a second of CPU time; arbitrary text
gets an answer or one-line errors, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fakes.projects import sources
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelpack.errors import ManifestError
from kernelpack.project import _schema
from kernelpack.project.manifest import KERNEL_KEYS, load

KERNELPACK = Path(sys.executable).parent / "kernelpack"
ROOT = Path(__file__).resolve().parents[2]
KERNELS = ("k0", "k1", "k2", "k3")

# Characters of values that are fine everywhere, and the ones kernelpack refuses somewhere.
SAFE = "abcXYZ019_-+.=/@%"
SHELL = "$`\"'\\;|&<>() ,:*?[]{}!#~"
CONTROL = "\n\r\t\x00\x1b\u2028"
FLAG_SHELL = SHELL.replace(",", "").replace(":", "")  # nvcc's own list separators are fine
GLOB_SHELL = "".join(c for c in SHELL if c not in "*?[]")


@pytest.fixture(scope="module")
def package() -> Iterator[Path]:
    """A package `pkg` whose kernels k0…k3 each hold csrc/a.cu and csrc/b.cpp."""
    with tempfile.TemporaryDirectory() as tmp:
        yield sources(
            Path(tmp) / "pkg", [f"{k}/csrc/{n}" for k in KERNELS for n in ("a.cu", "b.cpp")]
        )


VALIDATOR = jsonschema.Draft7Validator(
    json.loads((ROOT / _schema.SCHEMA).read_text(encoding="utf-8"))
)


# --- generated manifests: (value, number of problems) per key ---------------------------

Value = tuple[Any, int]


def _text(alphabet: str, min_size: int = 1) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=min_size, max_size=12)


def _with(chars: str) -> st.SearchStrategy[str]:
    """Safe text holding at least one of `chars`."""
    return st.tuples(_text(SAFE, 0), st.sampled_from(chars), _text(SAFE, 0)).map("".join)


def _good(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Value]:
    return value.map(lambda v: (v, 0))


def _bad(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Value]:
    return value.map(lambda v: (v, 1))


_FLAG = st.sampled_from(["-O3", "--use_fast_math", "-Xcompiler=-Wall,-Wextra", "-DFOO=1", "-g"])
_ARCH = st.sampled_from(["8.0", "9.0a", "10.0a", "12.0f", "7.5"])
_IDENT = st.from_regex(r"[A-Z_][A-Z0-9_]{0,6}", fullmatch=True)

KEY_VALUES: dict[str, st.SearchStrategy[Value]] = {
    "sources": st.one_of(
        _good(st.sampled_from([["csrc/a.cu"], ["csrc/a.cu", "csrc/b.cpp"], ["csrc/*.cu"]])),
        _bad(st.sampled_from([["csrc/none.cu"], ["../../x.cu"], ["/abs.cu"], [], "csrc/a.cu"])),
        # not * ? [ ]: as glob characters they may match csrc/a.cu
        _bad(_with(GLOB_SHELL).map(lambda s: [f"csrc/{s}.cu"])),
        _bad(_with(CONTROL).map(lambda s: [s])),
    ),
    "arch": st.one_of(
        _good(_ARCH),
        _good(st.lists(_ARCH, min_size=1, max_size=3)),
        _good(st.fixed_dictionaries({"x86_64": st.lists(_ARCH, min_size=1, max_size=2)})),
        _bad(st.sampled_from(["9.5", "sm_90a", "90", "", [], {"ppc64le": ["9.0a"]}, 9])),
    ),
    "abi": st.one_of(
        _good(st.sampled_from(["torch", "stable"])),
        _bad(_text(SAFE).filter(lambda s: s not in ("torch", "stable"))),
    ),
    "cxx-std": st.one_of(
        _good(st.sampled_from([17, 20, 23])),
        _bad(
            st.one_of(
                st.integers(-(2**63), 2**63 - 1).filter(lambda i: i not in (17, 20, 23)),
                st.just("17"),
            )
        ),
    ),
    "ptx": st.one_of(_good(st.booleans()), _bad(st.sampled_from(["yes", 1]))),
    # "cpu" changes what other keys mean (no arch, no ptx, no .cu): tested in test_manifest
    "backend": st.one_of(_good(st.just("cuda")), _bad(st.sampled_from(["gpu", "CPU", 1]))),
    "min-cuda": st.one_of(
        _good(st.sampled_from(["12.8", "13.0", "11.8.1"])),
        _bad(st.sampled_from(["twelve", 12, "12"])),
    ),
    "stable-target": st.one_of(
        _good(st.sampled_from(["2.10", "2.11"])), _bad(st.sampled_from(["2.9", "x", 2.1]))
    ),
    "platforms": st.one_of(
        _good(st.sampled_from([["x86_64"], ["aarch64"], ["x86_64", "aarch64"]])),
        _bad(st.sampled_from([["ppc64le"], [], "x86_64"])),
    ),
    "depends": st.one_of(_good(st.just(["cutlass"])), _bad(st.sampled_from([["nope"], "cutlass"]))),
    "libraries": st.one_of(
        _good(st.sampled_from([["cublas"], ["cuda", "m"]])), _bad(_with(SHELL).map(lambda s: [s]))
    ),
    "description": st.one_of(_good(_text(SAFE + " ", 0)), _bad(_with(CONTROL))),
    "ops": st.one_of(_good(_IDENT), _bad(_with("-. $"))),
    "include-dirs": st.one_of(
        _good(st.just(["csrc"])),
        _bad(st.sampled_from([["missing"], ["../../.."], ["csrc/a.cu"]])),
        _bad(_with(SHELL).map(lambda s: [s])),
    ),
    "nvcc-flags": st.one_of(
        _good(st.lists(_FLAG, max_size=3)),
        _bad(
            st.tuples(st.lists(_FLAG, max_size=2), _with(FLAG_SHELL + CONTROL)).map(
                lambda t: [*t[0], t[1]]
            )
        ),
    ),
    "cxx-flags": st.one_of(
        _good(st.lists(_FLAG, max_size=3)), _bad(_with(FLAG_SHELL + CONTROL).map(lambda s: [s]))
    ),
}


@st.composite
def _defines(draw: st.DrawFn) -> Value:
    """A defines table: each bad entry is its own problem."""
    names = draw(st.lists(_IDENT, max_size=4, unique=True))
    table: dict[str, Any] = {}
    problems = 0
    for name in names:
        kind = draw(
            st.sampled_from(["ok", "ok", "int", "bool", "shell", "control", "name", "float"])
        )
        if kind == "ok":
            table[name] = draw(_text(SAFE + " ()<>;|&", 0))
        elif kind == "int":
            table[name] = draw(st.integers(-(2**63), 2**63 - 1))
        elif kind == "bool":
            table[name] = draw(st.booleans())
        else:
            problems += 1
            if kind == "shell":
                table[name] = draw(_with("$`\"'\\,"))
            elif kind == "control":
                table[name] = draw(_with(CONTROL))
            elif kind == "name":
                table[name.lower() + "-x"] = "1"
            else:
                table[name] = 1.5
    return table, problems


KEY_VALUES["defines"] = _defines()
assert set(KEY_VALUES) == set(KERNEL_KEYS), "a new key needs a generator here"


@st.composite
def _kernel(draw: st.DrawFn) -> tuple[dict[str, Any], int]:
    optional = sorted(set(KEY_VALUES) - {"sources", "arch"})
    keys = draw(st.lists(st.sampled_from(optional), unique=True, max_size=6))
    table: dict[str, Any] = {}
    problems = 0
    for key in ("sources", "arch", *keys):
        value, bad = draw(KEY_VALUES[key])
        table[key] = value
        problems += bad
    if draw(st.integers(0, 9)) == 0:
        table[draw(st.sampled_from(["abii", "sorces", "nvcc_flag", "x"]))] = 1
        problems += 1
    return table, problems


@st.composite
def manifests(draw: st.DrawFn) -> tuple[dict[str, Any], int]:
    """A manifest of 1-4 kernels and the number of problems put into it."""
    names = draw(st.lists(st.sampled_from(KERNELS), min_size=1, max_size=4, unique=True))
    data: dict[str, Any] = {}
    problems = 0
    for name in names:
        table, bad = draw(_kernel())
        if draw(st.integers(0, 11)) == 0:  # a bad name is one problem; its keys are not read
            name, bad = draw(st.sampled_from(["a b", "1x", "class", "load", "x$y", "ü"])), 1
            if name in data:
                continue
        data[name] = table
        problems += bad
    return data, problems


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml, value)) + "]"
    return "{ " + ", ".join(f"{_toml(k)} = {_toml(v)}" for k, v in value.items()) + " }"


def _document(data: dict[str, Any]) -> str:
    out = []
    for name, table in data.items():
        bare = name.isascii() and name.replace("-", "_").isidentifier()
        out.append(f"[{name if bare else _toml(name)}]")
        out += [f"{key} = {_toml(value)}" for key, value in table.items()]
        out.append("")
    return "\n".join(out)


FUZZ = settings(
    max_examples=int(os.environ.get("KERNELPACK_FUZZ_EXAMPLES", "300")),
    deadline=None,  # timed below in CPU seconds: the machine running the tests may be busy
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(manifests())
def test_generated_manifest_is_accepted_or_gets_one_line_per_problem(
    package: Path, case: tuple[dict[str, Any], int]
) -> None:
    data, problems = case
    path = package / "kernels.toml"
    path.write_text(_document(data), encoding="utf-8")
    start = time.process_time()
    try:
        manifest = load(path)
    except ManifestError as exc:
        lines = exc.lines(1000)
    else:
        lines = []
        assert VALIDATOR.is_valid(data), "check accepts what the schema rejects"
        assert {spec.name for spec in manifest.kernels} == set(data)
        json.dumps([spec.to_json() for spec in manifest.kernels])
    assert time.process_time() - start < 1.0
    assert len(lines) == problems, lines
    assert all(line.startswith(f"{path}: ") and line.isprintable() for line in lines)
    order = [list(data).index(n) for line in lines for n in data if f"[{n}]" in line]
    assert order == sorted(order), "errors are not in file order"


# --- arbitrary text ---------------------------------------------------------------------

_TOML_BITS = st.sampled_from(
    [
        "[k0]",
        "[[k0]]",
        "sources = ",
        "arch = ",
        '"9.0a"',
        '["csrc/a.cu"]',
        "{",
        "}",
        "[",
        "]",
        "=",
        ",",
        "\n",
        '"',
        "'",
        "1" * 50,
        "9" * 4400,
        "-",
        ".",
        "#",
        "\\",
        "\x00",
        "$(id)",
        "defines = { X = ",
        "true",
        "1979-05-27",
        "inf",
        "nan",
        "\ud7ff",
        "\t",
    ]
)


@FUZZ
@given(st.lists(st.one_of(_TOML_BITS, st.text(max_size=8)), max_size=40).map("".join))
def test_arbitrary_text_gets_an_answer_or_one_line_errors(package: Path, text: str) -> None:
    path = package / "kernels.toml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    start = time.process_time()
    try:
        load(path)
    except ManifestError as exc:
        assert all(line.isprintable() for line in exc.lines(1000))
    assert time.process_time() - start < 1.0


# --- the command line, end to end --------------------------------------------------------


@settings(
    max_examples=int(os.environ.get("KERNELPACK_FUZZ_CLI_EXAMPLES", "15")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(manifests())
def test_check_exits_2_with_one_line_per_problem_and_no_traceback(
    package: Path, case: tuple[dict[str, Any], int]
) -> None:
    data, problems = case
    (package / "kernels.toml").write_text(_document(data), encoding="utf-8")
    result = subprocess.run(
        [str(KERNELPACK), "check", str(package)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    if problems == 0:
        assert (result.returncode, lines) == (0, [])
    else:
        assert result.returncode == 2
        shown = min(problems, 20) + (problems > 20)
        assert len(lines) == shown, result.stderr
        assert all(line.startswith("kernelpack check: error: ") for line in lines)
