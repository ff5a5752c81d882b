"""The export's `metadata.json` digests are the ones Hugging Face's `kernels` computes."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpack.release.hub import METADATA, SIGNATURE, variant_digest

rust = pytest.importorskip("kernels._rust")


def test_variant_digest_is_kernels_own_hash_variant(tmp_path: Path) -> None:
    folder = tmp_path / "torch-stable-abi210-cpu-x86_64-linux"
    files = {
        "__init__.py": b"from . import negate\n",
        "negate/_C.abi3.so": b"\x7fELF" + bytes(range(256)),
        "kpcpu/__init__.py": b"# compat\n",
        "_kernelpack.json": b"{}\n",
        METADATA: b"{}\n",  # not hashed: it holds the digests
        SIGNATURE: b"{}\n",  # not hashed: signed after
        "__pycache__/x.cpython-311.pyc": b"bytecode",
        "stray.pyc": b"bytecode",
    }
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    theirs = rust.Digest.hash_variant(rust.DigestAlgorithm.SHA256, folder).files
    assert variant_digest(folder) == theirs
    assert sorted(theirs) == [
        "__init__.py",
        "_kernelpack.json",
        "kpcpu/__init__.py",
        "negate/_C.abi3.so",
    ]
