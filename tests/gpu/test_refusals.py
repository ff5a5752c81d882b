"""Every op of llm_ops and moe_ops refuses bad input with a RuntimeError carrying its own
message (never a crash): wrong dtype, wrong device, CPU tensors, non-contiguous or misaligned
operands, wrong offsets dtype/length/device, out-of-range top_k, too many experts. Offsets
the kernel cannot trust (decreasing, negative, past M) are reported after the call, by
`check_offsets_errors`, with the op's name.

The cases run in a child process (`_refusal_cases.py`), so a crash is a failed case here
rather than the end of the whole test run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from _refusal_cases import CASES, EXPECTED

HERE = Path(__file__).resolve().parent


def _run(package: str) -> tuple[dict[str, dict[str, str | None]], str]:
    result = subprocess.run(
        [sys.executable, str(HERE / "_refusal_cases.py"), package],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])},
    )
    answers: dict[str, dict[str, str | None]] = {}
    running = ""
    for line in result.stdout.splitlines():
        row = json.loads(line)
        if row.get("start"):
            running = row["case"]
        else:
            answers[row["case"]] = row
            running = ""
    crash = (
        f"exit {result.returncode} during {running!r}: {result.stderr[-600:]}" if running else ""
    )
    if result.returncode != 0 and not crash:
        crash = f"exit {result.returncode}: {result.stderr[-600:]}"
    return answers, crash


@pytest.fixture(scope="module")
def llm_ops_answers(
    rmsnorm: ModuleType, silu_mul: ModuleType
) -> tuple[dict[str, dict[str, str | None]], str]:
    return _run("llm_ops")


@pytest.fixture(scope="module")
def moe_ops_answers(moe: ModuleType) -> tuple[dict[str, dict[str, str | None]], str]:
    return _run("moe_ops")


def _check(answers: tuple[dict[str, dict[str, str | None]], str], case: str, expected: str) -> None:
    rows, crash = answers
    assert case in rows, f"{case}: no answer ({crash or 'the child ended early'})"
    row = rows[case]
    assert row["raised"] == "RuntimeError", f"{case}: not refused"
    message = row["message"] or ""
    assert expected in message, f"{case}: {message!r} lacks {expected!r}"


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(EXPECTED["llm_ops"]))
def test_llm_ops_refuses(
    llm_ops_answers: tuple[dict[str, dict[str, str | None]], str], case: str
) -> None:
    _check(llm_ops_answers, case, EXPECTED["llm_ops"][case])


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(EXPECTED["moe_ops"]))
def test_moe_ops_refuses(
    moe_ops_answers: tuple[dict[str, dict[str, str | None]], str], case: str
) -> None:
    _check(moe_ops_answers, case, EXPECTED["moe_ops"][case])


def test_every_case_has_an_expected_message() -> None:
    source = (HERE / "_refusal_cases.py").read_text(encoding="utf-8")
    named = set(re.findall(r'\(\s*"([\w-]+)",\s*lambda', source))
    assert named == set(EXPECTED["llm_ops"]) | set(EXPECTED["moe_ops"])
    assert set(CASES) == set(EXPECTED)
