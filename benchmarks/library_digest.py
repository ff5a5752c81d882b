"""What verifying a library before it is loaded adds to `load()`: the SHA-256 of the file.

`load()` hashes the library it is about to open, once per process (see
`kernelpack_runtime.digest`). This times `digest.file_sha256` on files of the sizes of the
example libraries (llm_ops' sm_90a `_C.abi3.so`: about 0.8 MB and 1.5 MB) and on a 100 MB
library, from the page cache (a library about to be loaded is usually read anyway), median
of `-n` runs, and writes `benchmarks/results/library_digest.json`. `status()` hashes nothing:
`benchmarks/import_time.py` keeps measuring `import pkg; pkg.status()`.

    .venv/bin/python benchmarks/library_digest.py [-n 9] [--library FILE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from kernelpack_runtime.digest import file_sha256

SIZES_MB = (0.8, 1.5, 100.0)


def _time(path: Path, runs: int) -> float:
    file_sha256(path)  # into the page cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        file_sha256(path)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=9, help="runs per file (median)")
    parser.add_argument("--library", type=Path, action="append", default=[], help="also time")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "results" / "library_digest.json",
    )
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for size in SIZES_MB:
            path = Path(tmp) / f"lib_{size}MB.so"
            path.write_bytes(os.urandom(int(size * 1024 * 1024)))
            files.append((f"{size} MB", path))
        files += [(f"{p.parent.name}/{p.name}", p) for p in args.library]
        for label, path in files:
            ms = _time(path, args.n)
            mb = path.stat().st_size / 1024 / 1024
            rows.append({"file": label, "mb": round(mb, 2), "ms": round(ms, 3)})
            print(f"{label:>12}: {ms:8.2f} ms ({mb / (ms / 1000):.0f} MB/s)")
    load = os.getloadavg()[0]
    result = {
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_1min": round(load, 2),
        "runs": args.n,
        "load_added_ms": rows,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"load average {load:.2f}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
