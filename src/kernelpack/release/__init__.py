"""Release tooling: from a new kernel package to pinned, prebuilt wheels.

- `scaffold`: `kernelpack new`, a package that checks, builds and tests from the start.
- `contract`: `kernelpack contract`, the host-side contract of a built package and its changes.
- `workflow`: `kernelpack ci`, the GitHub Actions workflow that builds and pins the wheels.
- `pins`: `kernelpack pin`, `[tool.uv.sources]` entries for wheels, checked against `uv.lock`.

Never imported by the run time.
"""

from __future__ import annotations

__all__: list[str] = []
