"""Shared test setup. Its presence puts `tests/` on `sys.path` (pytest's default import mode),
so tests import the shared fakes as `from fakes import ...`."""
