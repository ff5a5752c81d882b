"""One cell of the stable-ABI build x run matrix, run by the torch under test.

`python cell.py` with the built `kprefuse` package on `sys.path`: loads the library, runs the
op on CPU, on meta and fake tensors and through `torch.library.opcheck`, and feeds it input it
refuses. Prints one JSON line: {"torch": ..., "checks": {name: "ok" | "<what went wrong>"}}.
A crash of the process (the bug this guards against) is the caller's finding: no JSON line.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import torch

checks: dict[str, str] = {}


def run(name: str, body: Callable[[], object]) -> None:
    try:
        body()
    except Exception as exc:  # a failed check is reported, not raised
        checks[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    else:
        checks[name] = "ok"


def refused(call: Callable[[], object], message: str) -> None:
    try:
        call()
    except RuntimeError as exc:
        if message not in str(exc):
            raise AssertionError(f"RuntimeError without {message!r}: {str(exc)[:200]!r}") from None
        return
    raise AssertionError("not refused")


def main() -> None:
    loaded: list[object] = []
    run("load", lambda: loaded.append(__import__("kprefuse.refuse", fromlist=["check"])))
    if not loaded:
        print(json.dumps({"torch": torch.__version__, "checks": checks}))
        return
    op = torch.ops.kprefuse_refuse.check
    x = torch.arange(4, dtype=torch.float32)

    def cpu() -> None:
        assert torch.equal(op(x, 2), x * 2)

    def meta() -> None:
        out = op(torch.empty(4, 3, device="meta"), 2)
        assert out.device.type == "meta" and out.shape == (4, 3)

    def fake() -> None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            out = op(torch.empty(5), 1)
        assert out.shape == (5,)

    run("cpu", cpu)
    run("meta", meta)
    run("fake", fake)
    run("opcheck", lambda: torch.library.opcheck(op.default, (x, 2)))
    run(
        "refuse-dtype", lambda: refused(lambda: op(x.double(), 2), "x must be float32, got dtype 7")
    )
    run("refuse-top_k", lambda: refused(lambda: op(x, 9), "top_k must be in [1, 8], got 9"))
    run(
        "refuse-meta",
        lambda: refused(lambda: op(torch.empty(2, device="meta"), 0), "got 0"),
    )
    print(json.dumps({"torch": torch.__version__, "checks": checks}))


if __name__ == "__main__":
    main()
