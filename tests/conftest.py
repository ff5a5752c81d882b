"""Shared test setup. Its presence puts `tests/` on `sys.path` (pytest's default import mode),
so tests import the shared fakes as `from fakes import ...` (and `from buildlog import
compiles`, whose lines the hook below writes)."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import pytest
from buildlog import ATTRIBUTE, announced
from fakes.nvml import build_fake_nvml


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[object], request: pytest.FixtureRequest
) -> Generator[None, object, object]:
    what = getattr(fixturedef.func, ATTRIBUTE, None)
    if what is None:
        return (yield)
    with announced(request.config, what, f"fixture {fixturedef.argname}"):
        return (yield)


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the stand-in libnvidia-ml.so.1 of fakes/nvml.py (skips without gcc)."""
    folder = build_fake_nvml(tmp_path_factory.mktemp("nvml"))
    if folder is None:
        pytest.skip("needs gcc to build the stand-in libnvidia-ml.so.1")
    return folder


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the test in its `tmp_path` (relative paths land there); returns it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
