"""The build record: the one literal pin of its JSON wire format, and its strict reader."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from kernelpack_runtime._files import write_text_atomic
from kernelpack_runtime.arch import Arch
from kernelpack_runtime.reason import Reason
from kernelpack_runtime.record import (
    BuildRecord,
    BuiltKernel,
    InvalidRecord,
    SelectionRecord,
    SkippedKernel,
    ToolchainRecord,
)

#: docs/runtime.md's example of a schema-2 record, byte for byte the builder's output.
SCHEMA_2 = {
    "schema": 2,
    "package": "llm_ops",
    "version": "0.1.0+cu130stable2.10",
    "env_prefix": "LLM_OPS",
    "toolchain": {
        "nvcc": "13.0.88",
        "cuda": "13.0",
        "torch": "2.14.1",
        "torch_cuda": "13.0",
        "cxx11_abi": True,
        "python": "3.11",
        "machine": "x86_64",
    },
    "kernels": {
        "rmsnorm": {
            "status": "built",
            "abi": "stable",
            "stable_target": "2.10",
            "archs": ["9.0a"],
            "ptx": False,
            "library": "rmsnorm/_C.abi3.so",
            "sources_sha256": "ab" * 32,
            "namespace": "llm_ops_rmsnorm",
            "backend": "cuda",
            "library_sha256": "cd" * 32,
        },
        "flash_moe": {
            "status": "skipped",
            "reason": {"code": "arch-unsupported", "message": "nvcc 12.4 cannot build sm_100a"},
        },
    },
}

TOOLCHAIN = ToolchainRecord("13.0.88", "13.0", "2.14.1", "13.0", True, "3.11", "x86_64")


def schema_1() -> dict[str, Any]:
    """What kernelpack wrote before schema 2: no `env_prefix`."""
    data = copy.deepcopy(SCHEMA_2)
    data["schema"] = 1
    del data["env_prefix"]
    return data


def test_schema_2_example_round_trips_unchanged() -> None:
    record = BuildRecord.from_json(SCHEMA_2)
    assert record.to_json() == SCHEMA_2


def test_the_typed_record_writes_exactly_the_wire_format() -> None:
    record = BuildRecord(
        package="llm_ops",
        version="0.1.0+cu130stable2.10",
        toolchain=TOOLCHAIN,
        env_prefix="LLM_OPS",
        kernels={
            "rmsnorm": BuiltKernel(
                abi="stable",
                stable_target="2.10",
                archs=(Arch.parse("9.0a"),),
                library="rmsnorm/_C.abi3.so",
                sources_sha256="ab" * 32,
                namespace="llm_ops_rmsnorm",
                library_sha256="cd" * 32,
            ),
            "flash_moe": SkippedKernel(
                Reason("arch-unsupported", "nvcc 12.4 cannot build sm_100a")
            ),
        },
    )
    assert json.loads(record.dumps()) == SCHEMA_2


def test_a_record_without_backend_or_library_digest_reads_as_cuda_unverified() -> None:
    data = copy.deepcopy(SCHEMA_2)
    del data["kernels"]["rmsnorm"]["backend"], data["kernels"]["rmsnorm"]["library_sha256"]
    built = BuildRecord.from_json(data).kernels["rmsnorm"]
    assert isinstance(built, BuiltKernel)
    assert built.backend == "cuda" and built.library_sha256 is None


@pytest.mark.parametrize(
    ("key", "value"), [("backend", "gpu"), ("library_sha256", "xyz"), ("library_sha256", 3)]
)
def test_a_bad_backend_or_library_digest_is_invalid(key: str, value: object) -> None:
    data = copy.deepcopy(SCHEMA_2)
    data["kernels"]["rmsnorm"][key] = value
    with pytest.raises(InvalidRecord, match=f"kernels.rmsnorm.{key}"):
        BuildRecord.from_json(data)


def test_built_and_skipped_kernels_are_distinct_types() -> None:
    record = BuildRecord.from_json(SCHEMA_2)
    built, skipped = record.kernels["rmsnorm"], record.kernels["flash_moe"]
    assert isinstance(built, BuiltKernel) and built.built and built.status == "built"
    assert isinstance(skipped, SkippedKernel) and not skipped.built
    assert skipped.reason == Reason("arch-unsupported", "nvcc 12.4 cannot build sm_100a")


def test_schema_1_is_still_read_with_the_default_env_prefix() -> None:
    record = BuildRecord.from_json(schema_1())
    assert record.env_prefix == "LLM_OPS"
    assert isinstance(record.kernels["rmsnorm"], BuiltKernel)


def test_a_library_in_the_package_itself_is_read() -> None:
    # A kernel-builder project's one library lies beside its `_ops.py`.
    data = _broken(["kernels", "rmsnorm", "library"], "_relu_1a2b3c4.abi3.so")
    built = BuildRecord.from_json(data).kernels["rmsnorm"]
    assert isinstance(built, BuiltKernel) and built.library == "_relu_1a2b3c4.abi3.so"


def test_the_optional_selection_round_trips() -> None:
    selection = {
        "max_jobs": 1,
        "torch_cuda_arch_list": "9.0a",
        "kernelpack_arch": "native",
        "native": ["9.0"],
    }
    data = {**SCHEMA_2, "selection": selection}
    record = BuildRecord.from_json(data)
    assert record.selection == SelectionRecord(1, "9.0a", "native", ("9.0",))
    assert record.to_json() == data


def test_a_custom_env_prefix_is_kept() -> None:
    record = BuildRecord.from_json({**SCHEMA_2, "env_prefix": "OPS"})
    assert record.env_prefix == "OPS"


def test_write_is_atomic_and_readable(tmp_path: Path) -> None:
    record = BuildRecord(
        package="p",
        version="0.1.0+cu130stable2.10",
        toolchain=TOOLCHAIN,
        kernels={"k": SkippedKernel(Reason("not-selected", "not asked"))},
    )
    target = tmp_path / "_kernelpack.json"
    record.write(target)
    assert BuildRecord.read(target) == record
    assert [p.name for p in tmp_path.iterdir()] == ["_kernelpack.json"]


def test_record_is_written_readable_by_everyone_under_the_usual_umask(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "_kernelpack.json", "{}")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "_kernelpack.json").stat().st_mode) == 0o644


def test_atomic_writes_respect_a_stricter_umask(tmp_path: Path) -> None:
    previous = os.umask(0o077)
    try:
        write_text_atomic(tmp_path / "f", "x")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "f").stat().st_mode) == 0o600


def test_newer_schema_is_refused_naming_it(tmp_path: Path) -> None:
    target = tmp_path / "_kernelpack.json"
    target.write_text(json.dumps({**SCHEMA_2, "schema": 3}))
    with pytest.raises(InvalidRecord, match="schema 3 is not supported"):
        BuildRecord.read(target)


def test_unknown_reason_code_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown reason code"):
        Reason("no-such-code", "x")


CACHE = {
    "launcher": "sccache",
    "backend": "redis",
    "hits": 12,
    "misses": 0,
    "remote_hits": 12,
    "local_hits": 0,
    "errors": 0,
    "read_only": True,
}


def test_cache_statistics_round_trip_as_an_optional_field() -> None:
    record = BuildRecord.from_json({**SCHEMA_2, "cache": CACHE})
    assert record.cache is not None and record.cache.remote_hits == 12
    assert record.to_json()["cache"] == CACHE
    assert "cache" not in BuildRecord.from_json(SCHEMA_2).to_json()


def _broken(path: list[str], value: object) -> dict[str, Any]:
    data = copy.deepcopy(SCHEMA_2)
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(_broken(["kernels"], ["ab"]), "kernels: expected an object, got a list"),
        pytest.param(
            _broken(["kernels", "rmsnorm", "library"], 5),
            "kernels.rmsnorm.library: expected a string, got a number",
            id="library-number",
        ),
        pytest.param(
            _broken(["kernels", "rmsnorm", "library"], "../../etc/x.so"),
            "kernels.rmsnorm.library: '../../etc/x.so' is not a library path inside the package",
            id="library-escapes",
        ),
        pytest.param(
            _broken(["kernels", "rmsnorm", "library"], "/usr/lib/x.so"),
            "kernels.rmsnorm.library: '/usr/lib/x.so' is not a library path inside the package",
            id="library-absolute",
        ),
        pytest.param(
            _broken(["kernels", "rmsnorm", "library"], "rmsnorm/lib-x.so"),
            "kernels.rmsnorm.library: 'rmsnorm/lib-x.so' is not a library path inside the package",
            id="library-not-a-module",
        ),
        pytest.param(
            _broken(["kernels", "rmsnorm", "archs"], "9.0a"),
            "kernels.rmsnorm.archs: expected a list of strings, got a string",
            id="archs-string",
        ),
        pytest.param(
            _broken(["kernels", "rmsnorm", "archs"], ["9.0a", "9.5"]),
            'kernels.rmsnorm.archs[1]: "9.5" is not a CUDA arch',
            id="archs-unknown",
        ),
        pytest.param(
            _broken(["kernels", "rmsnorm", "status"], "maybe"),
            "kernels.rmsnorm.status: 'maybe' is not one of built, skipped",
            id="status",
        ),
        pytest.param(
            _broken(["kernels", "rmsnorm", "abi"], "cxx"),
            "kernels.rmsnorm.abi: 'cxx' is not one of torch, stable",
            id="abi",
        ),
        pytest.param(
            _broken(["kernels", "rmsnorm", "ptx"], "no"),
            "kernels.rmsnorm.ptx: expected true or false, got a string",
            id="ptx",
        ),
        pytest.param(
            _broken(["kernels", "flash_moe", "reason", "code"], "bogus"),
            "kernels.flash_moe.reason.code: unknown reason code 'bogus'",
            id="reason-code",
        ),
        pytest.param(
            _broken(["kernels", "flash_moe", "reason"], None),
            "kernels.flash_moe.reason: expected an object, got null",
            id="reason-null",
        ),
        pytest.param(
            _broken(["toolchain", "torch"], ["2.14"]),
            "toolchain.torch: expected a string or null, got a list",
            id="toolchain",
        ),
        pytest.param(_broken(["env_prefix"], "A-B"), "env_prefix: 'A-B' is not", id="prefix"),
        pytest.param(_broken(["schema"], "2"), "schema: expected an integer, got a string"),
        pytest.param(
            _broken(["kernels", "rmsnorm", "namespace"], "a::b"),
            "kernels.rmsnorm.namespace: 'a::b' is not an identifier",
            id="namespace",
        ),
        pytest.param(["ab"], "the record: expected an object, got a list", id="top-list"),
        pytest.param(
            {**SCHEMA_2, "selection": {"max_jobs": "8"}},
            "selection.max_jobs: expected an integer or null, got a string",
            id="selection",
        ),
        pytest.param(
            {**SCHEMA_2, "cache": {**CACHE, "hits": "12"}},
            "cache.hits: expected an integer, got a string",
            id="cache",
        ),
    ],
)
def test_wrongly_typed_records_are_invalid_with_the_key_path(data: object, message: str) -> None:
    with pytest.raises(InvalidRecord, match="^" + re.escape(message)):
        BuildRecord.from_json(data)


def test_invalid_record_still_names_its_kernels(tmp_path: Path) -> None:
    target = tmp_path / "_kernelpack.json"
    target.write_text(json.dumps(_broken(["kernels", "rmsnorm", "library"], 5)))
    with pytest.raises(InvalidRecord) as raised:
        BuildRecord.read(target)
    assert raised.value.kernels == ("rmsnorm", "flash_moe")
    assert str(raised.value).startswith(f"{target}: kernels.rmsnorm.library:")


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        '{"schema": 2, "x": ' + "[" * 50_000 + "]" * 50_000 + "}",
        "not json",
        "\udcff".encode("utf-8", "surrogateescape").decode("latin-1"),
        '{"schema": ' + "9" * 5000 + "}",
        "",
    ],
    ids=["deep", "deep-value", "garbage", "bytes", "huge-int", "empty"],
)
def test_unparsable_text_is_invalid_never_another_error(text: str) -> None:
    with pytest.raises(InvalidRecord):
        BuildRecord.loads(text)


def test_non_utf8_bytes_are_invalid(tmp_path: Path) -> None:
    target = tmp_path / "_kernelpack.json"
    target.write_bytes(b'{"schema": 2, "package": "\xff\xfe"}')
    with pytest.raises(InvalidRecord, match="not valid JSON"):
        BuildRecord.read(target)


def test_a_fifo_record_is_invalid_without_blocking(tmp_path: Path) -> None:
    target = tmp_path / "_kernelpack.json"
    os.mkfifo(target)
    with pytest.raises(InvalidRecord, match="not a regular file"):
        BuildRecord.read(target)


def test_a_folder_record_is_invalid(tmp_path: Path) -> None:
    (tmp_path / "_kernelpack.json").mkdir()
    with pytest.raises(InvalidRecord, match="not a regular file"):
        BuildRecord.read(tmp_path / "_kernelpack.json")


def test_an_oversized_record_is_invalid_without_parsing(tmp_path: Path) -> None:
    target = tmp_path / "_kernelpack.json"
    with target.open("wb") as fh:
        fh.truncate(64 * 1024 * 1024)
    with pytest.raises(InvalidRecord, match="more than"):
        BuildRecord.read(target)


def test_a_missing_record_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        BuildRecord.read(tmp_path / "_kernelpack.json")


def _unreadable_by_this_user(target: Path) -> list[str]:
    """Make `target` unreadable for the reader: as root, a 0600 file of another owner read by
    `nobody`; otherwise mode 0000. Returns the reader's command prefix."""
    if os.geteuid() != 0:
        target.chmod(0)
        return []
    os.chown(target, 12345, 12345)
    target.chmod(0o600)
    target.parent.chmod(0o755)
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_a_record_other_users_cannot_read_is_invalid_with_its_mode_and_owner() -> None:
    # Not under pytest's tmp_path: its base folder is private to the user running pytest.
    folder = Path(tempfile.mkdtemp(prefix="kp-record-"))
    folder.chmod(0o755)
    target = folder / "_kernelpack.json"
    target.write_text(json.dumps(SCHEMA_2))
    prefix = _unreadable_by_this_user(target)
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from kernelpack_runtime.record import BuildRecord, InvalidRecord\n"
        "try:\n"
        f"    BuildRecord.read(Path({str(target)!r}))\n"
        "except InvalidRecord as exc:\n"
        "    print(exc)\n"
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(
        [*prefix, sys.executable, "-c", code], capture_output=True, text=True, env=env
    )
    if out.returncode != 0 and "setpriv" in " ".join(prefix):
        pytest.skip(f"cannot run as another user here: {out.stderr.strip()[-200:]}")
    shutil.rmtree(folder)
    assert "cannot be read: permission denied (mode " in out.stdout
    assert "chmod 644" in out.stdout
