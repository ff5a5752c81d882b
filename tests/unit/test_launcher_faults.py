"""A compiler cache that stalls or breaks never hangs a build, nor passes for a compile error.

The real sccache and ccache run here on a small C file with the host compiler. The stalled
remote cache is a Redis-speaking server started by the test on loopback: it answers
sccache's start-up storage check (the `.sccache_check` key), then, as a failover or a
half-open connection does, never answers again; or it answers nothing at all.
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import sysconfig
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelpack.toolchain.launcher import cache as compiler_cache

SOURCE = "int add_two(int x) { return x + 2; }\n"
TIMEOUT_S = 1.5
_DATA_COMMANDS = {b"GET", b"GETRANGE", b"SET", b"SETEX", b"EXISTS", b"STRLEN", b"DEL"}


def _tool(name: str) -> Path:
    found = shutil.which(name) or shutil.which(name, path=sysconfig.get_path("scripts"))
    if found is None:
        pytest.skip(f"{name} is not installed (scripts/bootstrap installs it)")
    return Path(found)


class StallingRedis:
    """A loopback server speaking just enough RESP for sccache's storage check.

    `answer_check`: answer requests about `.sccache_check` (the start-up check), stall on
    every other one; otherwise stall on everything. Stalling keeps the connection open and
    never writes to it.
    """

    def __init__(self, *, answer_check: bool) -> None:
        self.answer_check = answer_check
        self.requests: list[list[bytes]] = []
        self.store: dict[bytes, bytes] = {}
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])
        self._clients: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._sock.close()
        for client in self._clients:
            client.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            self._clients.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        buffer = b""
        stalled = False
        while True:
            try:
                data = client.recv(65536)
            except OSError:
                return
            if not data:
                return
            buffer += data
            while not stalled:
                command, buffer = _parse(buffer)
                if command is None:
                    break
                self.requests.append(command)
                data = command[0].upper() in _DATA_COMMANDS
                checking = len(command) > 1 and command[1] == b".sccache_check"
                if not self.answer_check or (data and not checking):
                    stalled = True
                    break
                client.sendall(self._reply(command))

    def _reply(self, command: list[bytes]) -> bytes:
        name = command[0].upper()
        if name == b"PING":
            return b"+PONG\r\n"
        if name in (b"GET", b"GETRANGE"):
            value = self.store.get(command[1])
            return b"$-1\r\n" if value is None else b"$%d\r\n%s\r\n" % (len(value), value)
        if name in (b"SET", b"SETEX"):
            self.store[command[1]] = command[-1]
        return b"+OK\r\n"


def _parse(buffer: bytes) -> tuple[list[bytes] | None, bytes]:
    """One RESP array of bulk strings from `buffer`, and the rest."""
    if b"\r\n" not in buffer:
        return None, buffer
    head, rest = buffer.split(b"\r\n", 1)
    if not head.startswith(b"*"):
        return head.split(), rest
    items = []
    for _ in range(int(head[1:])):
        if b"\r\n" not in rest:
            return None, buffer
        size, rest = rest.split(b"\r\n", 1)
        length = int(size[1:])
        if len(rest) < length + 2:
            return None, buffer
        items.append(rest[:length])
        rest = rest[length + 2 :]
    return items, rest


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SCCACHE_", "CCACHE_"))}
    return {**base, "SCCACHE_DIR": str(tmp_path / "sccache"), "CCACHE_DIR": str(tmp_path / "cc")}


@pytest.fixture
def short_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiler_cache, "REQUEST_TIMEOUT_S", TIMEOUT_S)


@pytest.fixture
def redis(request: pytest.FixtureRequest) -> Iterator[StallingRedis]:
    server = StallingRedis(answer_check=request.param)
    yield server
    server.close()


def _compile(tool: Path, env: dict[str, str], folder: Path, name: str) -> float:
    """Compile a fresh C file through `tool`; the seconds it took."""
    source = folder / f"{name}.c"
    source.write_text(SOURCE.replace("add_two", name))
    started = time.monotonic()
    subprocess.run(
        [str(tool), "cc", "-c", str(source), "-o", str(source.with_suffix(".o"))],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return time.monotonic() - started


@pytest.mark.parametrize("redis", [True], indirect=True)
def test_remote_cache_that_stalls_after_the_start_check_costs_one_timeout_and_one_warning(
    env: dict[str, str], tmp_path: Path, redis: StallingRedis, short_timeout: None
) -> None:
    sccache = _tool("sccache")
    env["SCCACHE_REDIS_ENDPOINT"] = f"tcp://127.0.0.1:{redis.port}"
    out = io.StringIO()
    with compiler_cache.session(sccache, env, stream=out) as cache:
        assert cache.server_port is not None  # the start-up check was answered
        first = _compile(sccache, cache.env, tmp_path, "first")
        second = _compile(sccache, cache.env, tmp_path, "second")
    assert any(r[0] == b"GET" and r[1] != b".sccache_check" for r in redis.requests)
    # Unbounded, sccache waits 60 s for the lookup and 30 s more for the write (measured).
    assert first < TIMEOUT_S + 15
    assert second < 10
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        f"kernelpack: warning: sccache's cache backend SCCACHE_REDIS_ENDPOINT=tcp://127.0.0.1:"
        f"{redis.port} did not answer a request within {TIMEOUT_S:g} s"
    )
    assert lines[0].endswith("the rest of this build compiles without it")
    assert cache.stats is not None and cache.stats.fallback is not None
    assert "did not answer" in cache.stats.fallback


@pytest.mark.parametrize("redis", [False], indirect=True)
def test_remote_cache_that_accepts_and_never_answers_falls_back_at_start(
    env: dict[str, str], tmp_path: Path, redis: StallingRedis, short_timeout: None
) -> None:
    sccache = _tool("sccache")
    env["SCCACHE_REDIS_ENDPOINT"] = f"redis://127.0.0.1:{redis.port}"
    out = io.StringIO()
    started = time.monotonic()
    with compiler_cache.session(sccache, env, stream=out) as cache:
        _compile(sccache, cache.env, tmp_path, "only")
    # sccache's own start-up check waits 30 s before it gives up (measured).
    assert time.monotonic() - started < TIMEOUT_S + 15
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert "did not answer a request within" in lines[0]
    assert lines[0].endswith("compiling with sccache's local disk cache")
    assert cache.stats is not None and cache.stats.backend == "local"


@pytest.mark.parametrize("kind", ["sccache", "ccache"])
def test_local_cache_folder_that_is_a_file_is_named_and_bypassed(
    env: dict[str, str], tmp_path: Path, kind: str
) -> None:
    tool = _tool(kind)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache should be\n")
    env[f"{kind.upper()}_DIR"] = str(blocker)
    out = io.StringIO()
    with compiler_cache.session(tool, env, stream=out) as cache:
        assert cache.launcher is None
        assert cache.server_port is None
    assert out.getvalue().splitlines() == [
        f"kernelpack: warning: the compiler cache folder {blocker} is not a folder; "
        "this build compiles without a compiler cache"
    ]
    assert cache.stats is None


def test_local_cache_folder_below_a_file_is_named_and_bypassed(
    env: dict[str, str], tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    env["SCCACHE_DIR"] = str(blocker / "cache")
    out = io.StringIO()
    with compiler_cache.session(_tool("sccache"), env, stream=out) as cache:
        assert cache.launcher is None
    assert f"{blocker / 'cache'} cannot be created: {blocker} is not a folder" in out.getvalue()


def test_corrupted_preprocessor_cache_entry_is_a_launcher_failure_not_a_compile_error(
    env: dict[str, str], tmp_path: Path
) -> None:
    sccache = _tool("sccache")
    env["SCCACHE_DIRECT"] = "true"
    (tmp_path / "value.h").write_text("#define VALUE 3\n")
    source = tmp_path / "uses.c"
    source.write_text('#include "value.h"\nint value(void) { return VALUE; }\n')
    argv = [str(sccache), "cc", "-c", str(source), "-o", str(tmp_path / "uses.o")]
    with compiler_cache.session(sccache, env) as cache:
        subprocess.run(argv, env=cache.env, check=True, capture_output=True, timeout=60)
    entries = [p for p in (tmp_path / "sccache" / "preprocessor").rglob("*") if p.is_file()]
    assert entries
    for entry in entries:
        entry.write_bytes(b"\0garbage")
    with compiler_cache.session(sccache, env) as cache:
        broken = subprocess.run(argv, env=cache.env, capture_output=True, text=True, timeout=60)
    assert broken.returncode != 0
    problem = compiler_cache.launcher_failure(broken.stderr)
    assert problem == "io error: unexpected end of file"


def test_a_compile_error_through_the_launcher_is_not_a_launcher_failure(
    env: dict[str, str], tmp_path: Path
) -> None:
    sccache = _tool("sccache")
    source = tmp_path / "bad.c"
    source.write_text("int broken(void) { return undeclared; }\n")
    argv = [str(sccache), "cc", "-c", str(source), "-o", str(tmp_path / "bad.o")]
    with compiler_cache.session(sccache, env) as cache:
        failed = subprocess.run(argv, env=cache.env, capture_output=True, text=True, timeout=60)
    assert failed.returncode != 0 and "undeclared" in failed.stderr
    assert compiler_cache.launcher_failure(failed.stderr) is None
