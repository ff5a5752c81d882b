"""Print the installed torch's requirements that apply here, less the named distributions.

scripts/bootstrap uses it to install torch without triton for the main job: pip has no way
to leave out one dependency, so torch goes in with --no-deps and its other requirements
(markers evaluated for this interpreter, extras left out) follow from this list.
"""

from __future__ import annotations

import sys
from importlib.metadata import requires

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def main(leave_out: list[str]) -> int:
    skipped = {canonicalize_name(name) for name in leave_out}
    for line in requires("torch") or []:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) in skipped:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        requirement.marker = None
        print(requirement)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
