"""Property-based: no record content and no library file makes the registry raise, crash or hang.

Records are mutated in JSON structure and types (any node replaced by any JSON value, keys
deleted, the text cut or spliced) and the registry and `kernelpack status` must answer with a
reason for every kernel the record names, in bounded time. Library files are replaced by
truncations and random bytes of a real shared library, bytes overwritten in its ELF and program
headers (what is checked before dlopen; relocations and code are what dlopen runs, and cannot
be checked without running it), FIFOs, folders, and links out of the package; since a bad
dlopen could kill the interpreter, that property runs in a child process (which runs
Hypothesis itself and reports its counts).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from registry_support import TORCH_2141_CU130, build_record, built, make_package, skipped

from kernelpack.cli import main
from kernelpack_runtime import Registry
from kernelpack_runtime.reason import BUILD_CODES, RUNTIME_CODES
from kernelpack_runtime.testing.fakes import fake_probe

pytest.importorskip("torch")

#: How long one answer may take on a loaded 2-core machine; the reader's own bound is far below.
SECONDS = 10.0
RECORD_EXAMPLES = 300
LIBRARY_EXAMPLES = 250
CODES = {*BUILD_CODES, *RUNTIME_CODES, "available", "skipped"}

_ids = iter(range(10**9))

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["built", "skipped", "stable", "torch", "k/_C.py", "../x", "9.0a"]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def _base(package: str) -> dict[str, Any]:
    record = build_record(
        package, {"k": built("k", package), "s": skipped("nvcc-missing", "no nvcc")}
    )
    return record.to_json()


@st.composite
def mutated_records(draw: st.DrawFn) -> tuple[str, Any]:
    """(a package name, the record text to write: a mutation of a valid record)."""
    package = f"kp_fuzz_{next(_ids)}_{os.getpid()}"
    data: Any = _base(package)
    for _ in range(draw(st.integers(1, 3))):
        data = _mutate_tree(draw, data)
    text = json.dumps(data)
    how = draw(st.sampled_from(["json", "json", "json", "cut", "splice", "nest"]))
    if how == "cut":
        text = text[: draw(st.integers(0, len(text)))]
    elif how == "splice":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.text(max_size=8)) + text[at:]
    elif how == "nest":
        depth = draw(st.integers(100, 5000))
        text = text.replace('"kernels": ', '"kernels": ' + "[" * depth, 1) + "]" * depth
    return package, text


def _mutate_tree(draw: st.DrawFn, node: Any) -> Any:
    """Replace, delete or add one node somewhere in `node` (a copy)."""
    node = copy.deepcopy(node)
    if not isinstance(node, (dict, list)) or not node or draw(st.integers(0, 3)) == 0:
        return draw(json_values)
    if isinstance(node, dict):
        keys = sorted(node)
        key = draw(st.sampled_from(keys))
        action = draw(st.sampled_from(["descend", "descend", "delete", "add"]))
        if action == "delete":
            del node[key]
        elif action == "add":
            node[draw(st.text(max_size=8))] = draw(json_values)
        else:
            node[key] = _mutate_tree(draw, node[key])
        return node
    index = draw(st.integers(0, len(node) - 1))
    node[index] = _mutate_tree(draw, node[index])
    return node


def _expected_names(text: str) -> set[str] | None:
    """The kernel names the record text lists, if it parses that far."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    kernels = data.get("kernels") if isinstance(data, dict) else None
    return set(kernels) if isinstance(kernels, dict) else None


@pytest.fixture(scope="module")
def fuzz_root() -> Any:
    folder = Path(tempfile.mkdtemp(prefix="kp-fuzz-"))
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))
    shutil.rmtree(folder, ignore_errors=True)


@settings(
    max_examples=RECORD_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=mutated_records())
def test_any_mutated_record_gives_a_reason_for_every_kernel_it_names(
    fuzz_root: Path, case: tuple[str, str]
) -> None:
    package, text = case
    make_package(fuzz_root, package, {"k": built("k", package)}, record=False)
    (fuzz_root / package / "_kernelpack.json").write_text(text, encoding="utf-8", errors="replace")
    started = time.monotonic()
    registry = Registry(package, probe=fake_probe("9.0"), read_torch=lambda: TORCH_2141_CU130)
    status = registry.status()
    names = _expected_names(text)
    if names is not None:
        assert set(status) == names
    for name, value in status.items():
        assert value.partition(":")[0] in CODES, value
        reason = registry.unavailable_reason(name)
        assert (reason is None) == (value == "available")
    if not status and registry.record_invalid:
        reason = registry.unavailable_reason("k")
        assert reason is not None and reason.code == "record-invalid"
    elif not status:
        with pytest.raises(ValueError, match="has no kernel 'k'"):
            registry.unavailable_reason("k")
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["status", str(fuzz_root / package), "--json"])
    assert code in (0, 1)
    assert len(err.getvalue().strip().splitlines()) <= 2, err.getvalue()
    assert "Traceback" not in err.getvalue()
    assert time.monotonic() - started < SECONDS


#: Runs in a child process: Hypothesis over library files; prints one JSON line of counts.
LIBRARY_FUZZ = textwrap.dedent(
    """
    import collections, importlib.machinery, itertools, json, os, shutil, struct, sys, time
    from pathlib import Path
    import torch  # imported once up front: the time bound is for the registry's answers
    from hypothesis import HealthCheck, given, settings, strategies as st
    sys.path.insert(0, {tests!r})
    from registry_support import TORCH_2141_CU130, built, make_package
    from kernelpack_runtime import Registry
    from kernelpack_runtime.testing.fakes import fake_probe

    root, good, outside = Path({root!r}), Path({good!r}).read_bytes(), Path({good!r})
    sys.path.insert(0, str(root))
    EXT = importlib.machinery.EXTENSION_SUFFIXES[0]
    # The ELF header and the program headers: what the runtime checks before dlopen. (Bytes
    # past them, relocations and code, are what dlopen executes: not checkable without it.)
    phoff, = struct.unpack_from("<Q", good, 32)
    phentsize, phnum = struct.unpack_from("<HH", good, 54)
    HEADERS = phoff + phentsize * phnum
    ids, counts, slowest = itertools.count(), collections.Counter(), [0.0]

    content = st.one_of(
        st.integers(0, len(good)).map(lambda n: ("cut", good[:n])),
        st.binary(max_size=4096).map(lambda b: ("random", b)),
        st.binary(min_size=0, max_size=4096).map(lambda b: ("elf-random", b"\\x7fELF" + b)),
        st.tuples(st.integers(0, HEADERS - 1), st.binary(min_size=1, max_size=8)).map(
            lambda t: ("header", good[: t[0]] + t[1] + good[t[0] + len(t[1]) :])
        ),
        st.sampled_from(["fifo", "folder", "outside", "dangling", "empty"]).map(lambda k: (k, b"")),
    )

    @settings(max_examples={examples}, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=content, slot=st.sampled_from(["recorded", "shadow"]))
    def run(case, slot):
        kind, data = case
        package = f"kp_lib_{{next(ids)}}"
        make_package(root, package, {{"k": built("k", package, library="k/_C.abi3.so")}})
        folder = root / package / "k"
        if slot == "shadow":
            shutil.copy(outside, folder / "_C.abi3.so")
        target = folder / ("_C.abi3.so" if slot == "recorded" else f"_C{{EXT}}")
        if kind == "fifo":
            os.mkfifo(target)
        elif kind == "folder":
            target.mkdir()
        elif kind == "outside":
            target.symlink_to(outside)
        elif kind == "dangling":
            target.symlink_to(root / "nowhere.so")
        else:
            target.write_bytes(data)
        print(kind, slot, package, flush=True)  # the last line names a case that crashed
        started = time.monotonic()
        reg = Registry(package, probe=fake_probe("9.0"), read_torch=lambda: TORCH_2141_CU130)
        status = reg.status()
        slowest[0] = max(slowest[0], time.monotonic() - started)
        assert set(status) == {{"k"}}, status
        code = status["k"].partition(":")[0]
        assert code in ("available", "load-failed", "namespace-collision"), status
        counts[f"{{kind}}/{{slot}}/{{code}}"] += 1

    run()
    print(json.dumps({{"examples": sum(counts.values()), "slowest": slowest[0],
                      "counts": dict(sorted(counts.items()))}}))
    """
)


def test_any_library_file_gives_a_reason_without_crashing_the_process(tmp_path: Path) -> None:
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to link a .so")
    source = tmp_path / "good.cpp"
    source.write_text('int table[20000] = {1};\nextern "C" int get(int i) { return table[i]; }\n')
    good = tmp_path / "good.so"
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(good)], check=True)
    (tmp_path / "packages").mkdir()
    script = LIBRARY_FUZZ.format(
        tests=str(Path(__file__).parent),
        root=str(tmp_path / "packages"),
        good=str(good),
        examples=LIBRARY_EXAMPLES,
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    env.pop("KERNELPACK_DISABLE", None)
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    last = out.stdout.strip().splitlines()[-1:] or ["(no output)"]
    assert out.returncode == 0, f"died on {last[0]!r} (exit {out.returncode}): {out.stderr[-3000:]}"
    report = json.loads(last[0])
    assert report["examples"] == LIBRARY_EXAMPLES
    assert report["slowest"] < SECONDS
    print(json.dumps(report, indent=1))  # the counts, shown with `pytest -s`
