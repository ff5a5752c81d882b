"""`python -m kernelpack`: the same as the `kernelpack` command."""

from kernelpack.cli import main

raise SystemExit(main())
