"""Check and summarise where the GPU tests ran: one GPU against `-n N --kernels-gpus auto`.

scripts/gpu-check runs tests/gpu twice with `--device-log` (tests/gpu/conftest.py: one JSON
line per test, with the test's CUDA device UUID, its worker and that worker's
`CUDA_VISIBLE_DEVICES`), once pinned to the first GPU and once over every GPU, then calls

    python3 scripts/gpu_devices.py --gpus GPUS.csv --one DIR --many DIR \
        --wall-one SECONDS --wall-many SECONDS --workers N --out multi-gpu.json

GPUS.csv is `nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader`. It writes the
summary JSON (GPU model and count, wall times, speed-up, tests per GPU, every problem found)
and exits 1 when a test ran on a GPU its worker was not given, when two workers were given
the same GPU while GPUs were left over, or when a GPU was never used although there were
workers for it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path


def _gpus(path: Path) -> list[tuple[str, str, str]]:
    """(index, uuid without its `GPU-` prefix, name) per line of nvidia-smi's CSV."""
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            index, uuid, name = (part.strip() for part in line.split(",", 2))
            rows.append((index, uuid.removeprefix("GPU-"), name))
    return rows


def _records(folder: Path) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for path in sorted(folder.glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def _check(
    records: list[dict[str, object]], by_index: dict[str, str], workers: int
) -> tuple[dict[str, int], list[str]]:
    """Tests per GPU index, and the problems: a test off its worker's first GPU, shared GPUs."""
    problems: list[str] = []
    per_gpu: Counter[str] = Counter()
    held: dict[str, set[str]] = {}
    for record in records:
        visible = str(record["cuda_visible_devices"] or "")
        worker = str(record["worker"])
        held.setdefault(worker, set()).add(visible)
        if record["uuid"] is None:
            continue  # the test never touched CUDA
        uuid = str(record["uuid"]).removeprefix("GPU-")
        expected = visible.split(",")[0] if visible else "0"
        if by_index.get(expected) != uuid:
            problems.append(
                f"{record['test']}: ran on GPU {uuid}, worker {worker} holds "
                f"CUDA_VISIBLE_DEVICES={visible or '(unset)'}"
            )
        index = next((i for i, u in by_index.items() if u == uuid), "?")
        per_gpu[index] += 1
    for worker, values in sorted(held.items()):
        if len(values) != 1:
            problems.append(f"worker {worker} ran with several CUDA_VISIBLE_DEVICES: {values}")
    firsts = [next(iter(v)).split(",")[0] for v in held.values() if len(v) == 1]
    if workers <= len(by_index) and len(set(firsts)) != len(firsts):
        problems.append(f"two workers share a GPU with GPUs to spare: {sorted(firsts)}")
    expected_used = min(workers, len(by_index))
    if len(per_gpu) < expected_used:
        problems.append(f"tests ran on {len(per_gpu)} GPUs, {expected_used} expected")
    return dict(sorted(per_gpu.items())), problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=Path, required=True)
    parser.add_argument("--one", type=Path, required=True)
    parser.add_argument("--many", type=Path, required=True)
    parser.add_argument("--wall-one", type=float, required=True)
    parser.add_argument("--wall-many", type=float, required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    gpus = _gpus(args.gpus)
    by_index = {index: uuid for index, uuid, _ in gpus}
    one = _records(args.one)
    many = _records(args.many)
    one_per_gpu, one_problems = _check(one, {"0": by_index["0"]}, 1)
    many_per_gpu, many_problems = _check(many, by_index, args.workers)
    problems = [f"one GPU: {p}" for p in one_problems] + [f"sharded: {p}" for p in many_problems]
    if len(one) != len(many):
        problems.append(f"{len(one)} tests ran on one GPU, {len(many)} sharded")
    summary = {
        "gpu": sorted({name for _, _, name in gpus}),
        "gpu_count": len(gpus),
        "workers": args.workers,
        "tests": {"one_gpu": len(one), "sharded": len(many)},
        "tests_without_cuda": sum(1 for r in many if r["uuid"] is None),
        "wall_s": {"one_gpu": round(args.wall_one, 1), "sharded": round(args.wall_many, 1)},
        "speedup": round(args.wall_one / args.wall_many, 2) if args.wall_many else None,
        "tests_per_gpu": {"one_gpu": one_per_gpu, "sharded": many_per_gpu},
        "problems": problems,
    }
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
