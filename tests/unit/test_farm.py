"""The farm's configuration: parsed once from the environment or `[tool.kernelpack]`, written
into sccache's client configuration (read back with tomllib), counted from sccache's stats.
The real farm is tested in tests/integration/test_dist_farm.py."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import tomllib

from kernelpack.errors import ManifestError, UsageError
from kernelpack.project.settings import Settings
from kernelpack.toolchain.launcher.cache import CacheStats
from kernelpack.toolchain.launcher.farm import Farm, FarmStats, client_config, with_settings

URL = "http://10.0.0.5:10600"


def test_no_scheduler_is_no_farm() -> None:
    assert Farm.from_environ({"KERNELPACK_DIST_TOKEN": "t"}) is None


@pytest.mark.parametrize("url", ["10.0.0.5:10600", "ftp://h:1", "http://:10600", "http://h:x"])
def test_a_scheduler_that_is_not_a_url_is_one_line(url: str) -> None:
    with pytest.raises(UsageError, match=r"KERNELPACK_DIST_SCHEDULER=.* is not a scheduler URL"):
        Farm.from_environ({"KERNELPACK_DIST_SCHEDULER": url})


def test_the_token_comes_from_its_file_and_never_shows(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    farm = Farm.from_environ(
        {"KERNELPACK_DIST_SCHEDULER": URL + "/", "KERNELPACK_DIST_TOKEN_FILE": str(token)}
    )
    assert farm == Farm(URL, "s3cret")
    assert "s3cret" not in repr(farm)


def test_a_missing_token_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"KERNELPACK_DIST_TOKEN_FILE=.*/nope: cannot read it"):
        Farm.from_environ(
            {"KERNELPACK_DIST_SCHEDULER": URL, "KERNELPACK_DIST_TOKEN_FILE": str(tmp_path / "nope")}
        )


def test_a_token_with_a_newline_is_refused() -> None:
    with pytest.raises(UsageError, match="control character"):
        Farm.from_environ({"KERNELPACK_DIST_SCHEDULER": URL, "KERNELPACK_DIST_TOKEN": "a\nb"})


def test_client_config_is_sccaches_dist_table_and_private(tmp_path: Path) -> None:
    odd = 'to"k\\en'
    path = client_config(Farm(URL, odd), tmp_path, {"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = tomllib.loads(path.read_text())
    assert data == {
        "dist": {
            "scheduler_url": URL,
            "toolchains": [],
            "cache_dir": str(tmp_path / "xdg" / "kernelpack" / "sccache-dist"),
            "auth": {"type": "token", "token": odd},
        }
    }


def test_sccache_stats_say_where_the_steps_ran() -> None:
    stats = {"compilations": 14, "dist_compiles": {"a:1": 7, "b:2": 5}, "dist_errors": 1}
    farm = FarmStats.from_sccache(URL, stats, hits=3)
    assert (farm.remote, farm.local, farm.cache_hits, farm.failed_remote) == (12, 2, 3, 1)
    assert farm.line() == (
        f"farm {URL}: 12 compiled remotely, 2 locally, 3 cache hits "
        "(1 failed remotely and ran here)"
    )
    cache = CacheStats("sccache", "local", 3, 12, 0, 3, 0, farm=farm)
    assert cache.line().endswith(f"; {farm.line()}")
    assert CacheStats.from_json(cache.to_json()) == cache


def test_settings_fill_in_what_the_environment_does_not_say(tmp_path: Path) -> None:
    env = with_settings({}, URL, "secrets/token", tmp_path)
    assert env == {
        "KERNELPACK_DIST_SCHEDULER": URL,
        "KERNELPACK_DIST_TOKEN_FILE": str(tmp_path / "secrets" / "token"),
    }
    mine = {"KERNELPACK_DIST_SCHEDULER": "http://mine:1", "KERNELPACK_DIST_TOKEN": "t"}
    assert with_settings(mine, URL, "secrets/token", tmp_path) == mine


def test_tool_kernelpack_dist_scheduler_must_be_a_url(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    ok = Settings.from_table({"dist-scheduler": URL, "dist-token-file": "~/t"}, pyproject)
    assert (ok.dist_scheduler, ok.dist_token_file) == (URL, "~/t")
    with pytest.raises(ManifestError, match=r"dist-scheduler.*is not a scheduler URL"):
        Settings.from_table({"dist-scheduler": "farm:10600"}, pyproject)
