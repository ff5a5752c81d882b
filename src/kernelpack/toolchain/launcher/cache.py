"""The compiler cache of one build: sccache's private server, and what the cache did.

`session()` wraps one build. For sccache it runs a private server for that build alone, on a
loopback port nobody else uses, configured by the build's own `SCCACHE_*` variables (its
backend: local disk, Redis, S3, GCS, the GitHub Actions cache...), and stops it afterwards;
the server's statistics are then exactly this build's. The server gets SIGTERM when the
build dies, so a killed build leaves none behind. A server that dies during the build is
restarted by the next compile (sccache's client starts one when none answers) and stopped
with the rest. A backend that cannot be reached (a closed port, a failed start, a start that
does not finish within `START_TIMEOUT_S`) is reported in one warning line and the build goes
on with sccache's local disk cache: never a hang, the exit status unchanged. For ccache the
statistics come from a stats log of this build alone (`CCACHE_STATSLOG`, one entry per ccache
call), not from the cache folder's counters, which every build sharing it moves. Either way
the counts are per compile command: hits + misses = the compiles the launcher ran (sccache
also counts the phases it splits an nvcc compile into; those are left out). With a distributed
farm configured (`kernelpack.toolchain.launcher.farm`), sccache's server reads a private
client configuration naming it, and the statistics say where the compiles ran.

Every request to a remote backend given as a plain-TCP endpoint (Redis, memcached, an
`http://` endpoint) goes through a loopback relay of this session (`_Relay`): a request
with no answer within `REQUEST_TIMEOUT_S` (a failover, a half-open connection) closes the
relay for the rest of the build, so sccache's later requests fail at once and each compile
runs without the remote cache, after one warning line. (TLS endpoints cannot be relayed;
sccache's own time limits apply to them.)

A broken local cache (its folder a file, not writable, or an entry sccache cannot read) is
not a compile error: a folder that cannot be used is found before the build, and a compile
that fails inside the launcher itself (`sccache: encountered fatal error`, `ccache: error:`)
raises `CacheFailure`; either way the build bypasses the launcher after one warning line
naming the cache folder (`Session.bypass`).
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TextIO
from urllib.parse import urlsplit

from kernelpack import processes
from kernelpack.errors import BuildError
from kernelpack.toolchain.launcher import REMOTE_PREFIXES, kind_of
from kernelpack.toolchain.launcher import farm as dist
from kernelpack_runtime._files import write_text_atomic
from kernelpack_runtime.record import CacheRecord

__all__ = [
    "REQUEST_TIMEOUT_S",
    "START_TIMEOUT_S",
    "STATS_FILE",
    "CacheFailure",
    "CacheStats",
    "Session",
    "launcher_failure",
    "load",
    "save",
    "session",
]

#: The build folder's copy of the last compiling build's statistics (see `save`).
STATS_FILE = "cache-stats.json"

#: Longest wait for a private sccache server (its backend check included) to answer.
START_TIMEOUT_S = 20.0

#: Longest wait for a remote backend's answer to one request (relayed endpoints).
REQUEST_TIMEOUT_S = 10.0

_CALL_TIMEOUT_S = 20.0
_PROBE_TIMEOUT_S = 3.0
_POLL_S = 0.02

# URL-valued variables whose host:port can be probed before sccache is asked to use them.
_ENDPOINT_VARIABLES = (
    "SCCACHE_REDIS_ENDPOINT",
    "SCCACHE_REDIS",
    "SCCACHE_ENDPOINT",
    "SCCACHE_MEMCACHED_ENDPOINT",
    "SCCACHE_WEBDAV_ENDPOINT",
)
_DEFAULT_PORTS = {"redis": 6379, "rediss": 6379, "tcp": 6379, "http": 80, "https": 443}
# Endpoint schemes spoken in clear, so a relay can stand in between.
_RELAYED_SCHEMES = ("redis", "tcp", "http", "memcached")
# How the launchers report a failure of their own (not the compiler's).
_FAILURE_MARKERS = ("sccache: encountered fatal error", "sccache: error:", "ccache: error:")


class CacheFailure(BuildError):
    """A compile failed inside the compiler launcher (its cache), not in the compiler."""


@dataclass(frozen=True)
class CacheStats:
    """What the compiler cache did for one build."""

    launcher: str
    """"sccache" or "ccache"."""
    backend: str
    """Where hits come from: "local" (disk) or the remote kind ("redis", "s3", "gha"...)."""
    hits: int
    misses: int
    remote_hits: int
    local_hits: int
    errors: int
    """Cache reads or writes that failed (the compile itself then ran locally)."""
    read_only: bool = False
    """The backend was used read-only (`SCCACHE_*_RW_MODE=READ_ONLY`): nothing was written."""
    writes: int | None = None
    """Objects written to the cache (sccache reports it)."""
    fallback: str | None = None
    """Why the configured backend was not used (then `backend` is "local")."""
    farm: dist.FarmStats | None = None
    """Where the compiles ran, when a distributed farm took part in the build."""

    def line(self) -> str:
        """`cache: sccache (redis) 12 hits (12 remote, 0 local), 0 misses`."""
        mode = ", read-only" if self.read_only else ""
        text = (
            f"cache: {self.launcher} ({self.backend}{mode}) {self.hits} hits "
            f"({self.remote_hits} remote, {self.local_hits} local), {self.misses} misses"
        )
        if self.errors:
            text += f", {self.errors} errors"
        if self.farm is not None:
            text += f"; {self.farm.line()}"
        return text

    def to_json(self) -> dict[str, Any]:
        """Everything, as JSON values (the build folder's copy; see `save`): the record's
        `cache` field (one owner of its shape) plus the write count."""
        data = self.record().to_json()
        if self.writes is not None:
            data["writes"] = self.writes
        if self.farm is not None:
            data["farm"] = self.farm.to_json()
        return data

    def record(self) -> CacheRecord:
        """The build record's `cache` field."""
        return CacheRecord(
            launcher=self.launcher,
            backend=self.backend,
            hits=self.hits,
            misses=self.misses,
            remote_hits=self.remote_hits,
            local_hits=self.local_hits,
            errors=self.errors,
            read_only=self.read_only,
            fallback=self.fallback,
        )

    @classmethod
    def from_json(cls, data: object) -> CacheStats | None:
        """The statistics `to_json` wrote; None for anything else."""
        if not isinstance(data, dict):
            return None
        counts = ("hits", "misses", "remote_hits", "local_hits", "errors")
        if not all(type(data.get(k)) is int for k in counts):
            return None
        if not isinstance(data.get("launcher"), str) or not isinstance(data.get("backend"), str):
            return None
        writes, fallback = data.get("writes"), data.get("fallback")
        return cls(
            launcher=data["launcher"],
            backend=data["backend"],
            hits=data["hits"],
            misses=data["misses"],
            remote_hits=data["remote_hits"],
            local_hits=data["local_hits"],
            errors=data["errors"],
            read_only=data.get("read_only") is True,
            writes=writes if type(writes) is int else None,
            fallback=fallback if isinstance(fallback, str) else None,
            farm=dist.FarmStats.from_json(data.get("farm")),
        )


def save(stats: CacheStats | None, build_dir: Path) -> None:
    """Keep a compiling build's `stats` in the build folder (None: it had none), so that a
    later build that compiles nothing reports those of the build that made its libraries."""
    path = build_dir / STATS_FILE
    if stats is None:
        path.unlink(missing_ok=True)
    else:
        write_text_atomic(path, json.dumps(stats.to_json()) + "\n")


def load(build_dir: Path) -> CacheStats | None:
    """The statistics of the last build of `build_dir` that compiled something, if any."""
    try:
        data = json.loads((build_dir / STATS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return CacheStats.from_json(data)


class Session:
    """One build's launcher: the environment its compiles run in, and its statistics.

    Use `session()` to make one; `env` and `launcher` are what ninja must use, `stats` is
    filled when the session closes.
    """

    def __init__(self, launcher: Path | None, env: dict[str, str], cwd: Path | None = None) -> None:
        self.launcher = launcher
        self.env = env
        self.stats: CacheStats | None = None
        self.warning: str | None = None
        self.server_port: int | None = None
        self._server: subprocess.Popen[bytes] | None = None
        self._ccache_log: Path | None = None
        self._fallback: str | None = None
        self.farm: dist.Farm | None = None
        """The distributed farm this build's compiles are sent to (None: all local)."""
        self._farm_folder: Path | None = None
        self._binary = launcher
        self._relays: list[_Relay] = []
        self._stream: TextIO | None = None
        self.cwd = cwd
        """The folder sccache's server runs in (None: this process's)."""

    @property
    def cache_dir(self) -> Path | None:
        """The launcher's local cache folder (None: not known)."""
        return _local_cache_dir(kind_of(self._binary), self._binary, self.env)

    def warn(self, text: str) -> None:
        """One warning line on the session's stream."""
        out = self._stream if self._stream is not None else sys.stderr
        out.write(f"kernelpack: warning: {text}\n")
        out.flush()

    def failed(self, failure: CacheFailure) -> str:
        """`failure` as a warning: which launcher, its cache folder, what it said."""
        name = self._binary.name if self._binary is not None else "the compiler launcher"
        folder = self.cache_dir
        where = f" (its cache {folder})" if folder is not None else ""
        return f"{name}{where} failed, not the compiler: {failure}"

    def bypass(self, problem: str) -> None:
        """Go on without the launcher for the rest of this build, after one warning."""
        self.warn(f"{problem}; this build compiles without a compiler cache")
        self.launcher = None
        self._fallback = problem


@contextmanager
def session(
    launcher: Path | None,
    env: Mapping[str, str],
    *,
    stream: TextIO | None = None,
    active: bool = True,
    cwd: Path | None = None,
) -> Iterator[Session]:
    """Run the build inside: start what the launcher needs, collect its statistics, stop it.

    `active=False` (nothing to compile) starts nothing and records no statistics. The
    fallback warning, when there is one, goes to `stream` (default stderr) as one line.
    `cwd` is the folder the compiles run in (the build folder): sccache's server runs there
    too, so that a source path relative to the working folder means the same file to both.
    """
    current = Session(launcher, dict(env), cwd)
    current._stream = stream
    kind = kind_of(launcher) if active else None
    try:
        broken = _local_cache_problem(current.cache_dir) if kind is not None else None
        if broken is not None:
            current.bypass(broken)
            kind = None
        elif active:
            _use_farm(current, kind, stream)
        if kind == "sccache":
            assert launcher is not None
            _start_sccache(current, launcher)
        elif kind == "ccache":
            current._ccache_log = _ccache_stats_log(current.env)
        if current.warning:
            current.warn(current.warning)
        yield current
        if kind == "sccache" and current.launcher is not None:
            current.stats = _sccache_stats(current)
        elif kind == "ccache" and current._ccache_log is not None:
            current.stats = _ccache_stats(current._ccache_log, current.env)
    finally:
        if kind == "sccache":
            _stop_sccache(current)
        if current._farm_folder is not None:
            shutil.rmtree(current._farm_folder, ignore_errors=True)
        for relay in current._relays:
            relay.close()
        if current._ccache_log is not None:
            with suppress(OSError):
                current._ccache_log.unlink(missing_ok=True)


def _use_farm(current: Session, kind: str | None, stream: TextIO | None) -> None:
    """Point sccache at the farm `current.env` configures, when it can take compiles; else
    one warning (the build compiles locally). `UsageError` for a misconfigured farm."""
    farm = dist.Farm.from_environ(current.env)
    if farm is None:
        return
    problem: str | None
    if kind != "sccache":
        problem = f"{dist.SCHEDULER} needs sccache as the compiler launcher"
    else:
        problem = farm.check()
    if problem is not None:
        out = stream if stream is not None else sys.stderr
        out.write(f"kernelpack: warning: {problem}; compiling on this machine only\n")
        out.flush()
        return
    current._farm_folder = Path(tempfile.mkdtemp(prefix="kernelpack-dist-"))
    config = dist.client_config(farm, current._farm_folder, current.env)
    current.env["SCCACHE_CONF"] = str(config)
    current.farm = farm


def launcher_failure(output: str) -> str | None:
    """The launcher's own error line in a failed step's `output`, None when the compiler
    (not the launcher) failed."""
    lines = [line.strip() for line in output.splitlines()]
    for index, line in enumerate(lines):
        if line.startswith(_FAILURE_MARKERS):
            detail = next(
                (
                    rest
                    for rest in lines[index:]
                    if rest.startswith(("sccache: error:", "ccache: error:"))
                ),
                line,
            )
            return detail.split("error:", 1)[-1].strip() or line
    return None


def _local_cache_dir(
    kind: str | None, launcher: Path | None, env: Mapping[str, str]
) -> Path | None:
    if kind == "sccache":
        folder = env.get("SCCACHE_DIR", "").strip()
        if folder:
            return Path(folder)
        cache_home = env.get("XDG_CACHE_HOME", "").strip()
        home = env.get("HOME", "").strip()
        if cache_home:
            return Path(cache_home) / "sccache"
        return Path(home) / ".cache" / "sccache" if home else None
    if kind == "ccache":
        folder = env.get("CCACHE_DIR", "").strip()
        if folder:
            return Path(folder)
        if launcher is not None:
            out = _call([str(launcher), "--get-config", "cache_dir"], env, text=True)
            if out and out.strip():
                return Path(out.strip())
    return None


def _local_cache_problem(folder: Path | None) -> str | None:
    """Why the local cache folder cannot be used (named), None when it can (or is unknown)."""
    if folder is None:
        return None
    probe = folder
    while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
        probe = probe.parent
    if probe == folder and not folder.is_dir():
        return f"the compiler cache folder {folder} is not a folder"
    if not probe.is_dir():
        return f"the compiler cache folder {folder} cannot be created: {probe} is not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "is not writable" if probe == folder else f"cannot be created in {probe}"
        return f"the compiler cache folder {folder} {what}"
    return None


# --- sccache ----------------------------------------------------------------------------


def _start_sccache(current: Session, launcher: Path) -> None:
    env = current.env
    problem = _unreachable_endpoint(env)
    if problem is None:
        _relay_endpoints(current)
        problem = _spawn_server(current, launcher, env)
        if problem is None:
            return
        problem = current._fallback or problem  # a relayed backend that stalled at start
    local = _local_only(env)
    current.warning = f"{problem}; compiling with sccache's local disk cache"
    current._fallback = problem
    second = _spawn_server(current, launcher, local)
    if second is None:
        current.env = local
        return
    current.warning = f"{problem}, and {second}; compiling without a compiler cache"
    current.launcher = None
    current.env = {k: v for k, v in env.items() if k != "SCCACHE_SERVER_PORT"}


def _spawn_server(current: Session, launcher: Path, env: dict[str, str]) -> str | None:
    """Start a private server in `env` (port chosen here); None once it answers, else why."""
    port = _free_port()
    env["SCCACHE_SERVER_PORT"] = str(port)
    server_env = {**env, "SCCACHE_START_SERVER": "1", "SCCACHE_NO_DAEMON": "1"}
    with tempfile.TemporaryFile() as log:
        try:
            proc = subprocess.Popen(
                [str(launcher)],
                env=server_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=current.cwd,
                # Its own group (Ctrl-C reaches the compiles, not the server), and SIGTERM
                # when this process dies: a killed build leaves no server behind.
                preexec_fn=processes.group_leader(os.getpid()),
            )
        except OSError as exc:
            return f"{launcher} cannot be run ({exc})"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return f"sccache could not start its server: {_last_error(log)}"
            if _answers(port):
                current._server = proc
                current.server_port = port
                return None
            time.sleep(_POLL_S)
        _kill(proc)
        detail = _last_error(log)
    return (
        f"sccache's server did not start within {START_TIMEOUT_S:.0f} s "
        f"(its cache backend may be unreachable{': ' + detail if detail else ''})"
    )


def _stop_sccache(current: Session) -> None:
    if current.server_port is None:
        return
    # Whichever server listens on the private port (ours, or one a compile restarted).
    _call([str(current._binary or "sccache"), "--stop-server"], current.env)
    if current._server is not None:
        try:
            current._server.wait(timeout=_CALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _kill(current._server)
    current.server_port = None


def _sccache_stats(current: Session) -> CacheStats | None:
    assert current.launcher is not None
    out = _call(
        [str(current.launcher), "--show-stats", "--stats-format=json"], current.env, text=True
    )
    if out is None:
        return None
    try:
        data = json.loads(out)
        stats = data["stats"]
    except (ValueError, KeyError, TypeError):
        return None
    hits, misses = _compile_counts(stats)
    levels = stats.get("multi_level")
    if isinstance(levels, list) and levels:
        # A chain such as "disk,redis": each level says where its hits came from.
        kinds = [_backend_of(str(level.get("location", ""))) for level in levels]
        backend = "+".join(kinds)
        level_hits = [int(level.get("hits") or 0) for level in levels]
        local_level = sum(n for n, kind in zip(level_hits, kinds, strict=True) if kind == "local")
        # The levels count nvcc's phases too: share the compiles' hits out in proportion.
        local_hits = round(hits * local_level / sum(level_hits)) if sum(level_hits) else 0
        remote_hits = hits - local_hits
    else:
        backend = _backend_of(str(data.get("cache_location", "")))
        remote_hits, local_hits = (0, hits) if backend == "local" else (hits, 0)
    remote = backend != "local"
    farm = None
    if current.farm is not None and current.env.get("SCCACHE_CONF") != os.devnull:
        farm = dist.FarmStats.from_sccache(current.farm.scheduler, stats, hits)
    return CacheStats(
        launcher="sccache",
        backend=backend,
        hits=hits,
        misses=misses,
        remote_hits=remote_hits,
        local_hits=local_hits,
        errors=_total(stats.get("cache_errors"))
        + int(stats.get("cache_read_errors") or 0)
        + int(stats.get("cache_write_errors") or 0)
        + int(stats.get("cache_timeouts") or 0),
        read_only=_read_only(current.env) if remote else False,
        writes=int(stats.get("cache_writes") or 0),
        fallback=current._fallback,
        farm=farm,
    )


def _backend_of(location: str) -> str:
    """sccache's `cache_location` ("Local disk: ...", "redis, name: ...", "S3, bucket: ...")."""
    head = location.split(",", 1)[0].split(":", 1)[0].strip().lower()
    if head.startswith("local"):
        return "local"
    return {"github actions cache": "gha"}.get(head, head.replace(" ", "-") or "unknown")


def _read_only(env: Mapping[str, str]) -> bool:
    return any(
        key.endswith("_RW_MODE") and value.strip().upper() == "READ_ONLY"
        for key, value in env.items()
        if key.startswith("SCCACHE_") and key != "SCCACHE_LOCAL_RW_MODE"
    )


# The phases sccache splits one nvcc compile into, each counted besides the compile itself.
_NVCC_PHASES = frozenset({"CUDA (Device code)", "PTX", "CUBIN"})


def _counts(counter: object) -> dict[str, int]:
    """A sccache counter's counts by language (empty when it has none)."""
    counts = counter.get("counts") if isinstance(counter, dict) else None
    if not isinstance(counts, dict):
        return {}
    return {str(k): int(v) for k, v in counts.items() if isinstance(v, int)}


def _compile_counts(stats: Mapping[str, object]) -> tuple[int, int]:
    """(hits, misses) over compile commands. sccache counts an nvcc compile's host step under
    `CUDA` and its cudafe++, cicc and ptxas steps apart (`_NVCC_PHASES`), and never caches
    the compile whole: a `.cu` compile hit only when its steps did, so as many `.cu` compiles
    missed as the most-missed step says (exact for one arch per compile, a lower bound for
    several)."""
    hit, missed = _counts(stats.get("cache_hits")), _counts(stats.get("cache_misses"))
    hits = sum(n for k, n in hit.items() if k not in _NVCC_PHASES and k != "CUDA")
    misses = sum(n for k, n in missed.items() if k not in _NVCC_PHASES and k != "CUDA")
    cuda = hit.get("CUDA", 0) + missed.get("CUDA", 0)
    cuda_missed = min(cuda, max([missed.get(k, 0) for k in (*_NVCC_PHASES, "CUDA")]))
    return hits + cuda - cuda_missed, misses + cuda_missed


def _total(counter: object) -> int:
    """A counter's total over compile commands (`CUDA`, `C/C++`), nvcc's phases left out."""
    return sum(n for k, n in _counts(counter).items() if k not in _NVCC_PHASES)


def _local_only(env: Mapping[str, str]) -> dict[str, str]:
    local = {k: v for k, v in env.items() if not k.startswith(REMOTE_PREFIXES)}
    # A config file may name a backend too; the fallback must not read it.
    local["SCCACHE_CONF"] = os.devnull
    return local


def _unreachable_endpoint(env: Mapping[str, str]) -> str | None:
    """Why a backend endpoint in `env` refuses connections, None when all answer (or none)."""
    for variable in _ENDPOINT_VARIABLES:
        value = env.get(variable, "").strip()
        if not value:
            continue
        address = _host_port(value)
        if address is None:
            continue
        try:
            with socket.create_connection(address, timeout=_PROBE_TIMEOUT_S):
                pass
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            return f"sccache's cache backend {variable}={value} is unreachable ({reason.lower()})"
    return None


def _relay_endpoints(current: Session) -> None:
    """Put a `_Relay` in front of every plain-TCP backend endpoint of `current.env`."""
    for variable in _ENDPOINT_VARIABLES:
        value = current.env.get(variable, "").strip()
        url = urlsplit(value if "://" in value else f"tcp://{value}")
        address = _host_port(value) if value else None
        if address is None or url.scheme not in _RELAYED_SCHEMES:
            continue
        shown = f"sccache's cache backend {variable}={value}"

        def stalled(shown: str = shown) -> None:
            problem = f"{shown} did not answer a request within {REQUEST_TIMEOUT_S:g} s"
            current._fallback = problem
            if current.server_port is not None:  # else the failed start says it, once
                current.warn(f"{problem}; the rest of this build compiles without it")

        relay = _Relay(address, stalled, redis="REDIS" in variable)
        current._relays.append(relay)
        netloc = url.netloc.rpartition("@")
        local = f"127.0.0.1:{relay.port}"
        current.env[variable] = url._replace(
            netloc=f"{netloc[0]}@{local}" if netloc[1] else local
        ).geturl()
        if "://" not in value:
            current.env[variable] = local


# After a stall: the connection set-up and health checks of a Redis client succeed, every
# other command fails (a refused or closed connection is retried by sccache's pool for 30 s).
_RESP_STALLED = b"-ERR kernelpack: the cache backend stopped answering\r\n"
_RESP_REPLIES = {b"PING": b"+PONG\r\n", b"CLIENT": b"+OK\r\n", b"SELECT": b"+OK\r\n"}


def _resp_command(buffer: bytes) -> tuple[bytes, bytes] | None:
    """The name of the first whole RESP command in `buffer` and the bytes after it."""
    head, sep, rest = buffer.partition(b"\r\n")
    if not sep:
        return None
    if not head.startswith(b"*"):  # an inline command
        return (head.split() or [b""])[0], rest
    name = b""
    try:
        count = int(head[1:])
        for index in range(count):
            size, sep, rest = rest.partition(b"\r\n")
            length = int(size[1:])
            if not sep or len(rest) < length + 2:
                return None
            name = rest[:length] if index == 0 else name
            rest = rest[length + 2 :]
    except ValueError:
        return b"", b""
    return name, rest


class _Relay:
    """A loopback TCP relay to one backend address that bounds every request in time.

    Bytes pass through unchanged. When the client has sent bytes and the backend has not
    answered within `REQUEST_TIMEOUT_S`, the backend is taken as stalled: every connection
    is closed, and so is every later one as soon as it is accepted, so later requests fail
    at once instead of waiting (a refused connection would not do: sccache's connection
    pool retries those for 30 s); `on_stall` is called once.
    """

    def __init__(
        self, address: tuple[str, int], on_stall: Callable[[], None], *, redis: bool = False
    ) -> None:
        self.address = address
        self.redis = redis
        self.on_stall = on_stall
        self.stalled = False
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, name="kernelpack-cache-relay", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        if self.stalled:
            self._refuse(client)
            return
        try:
            upstream = socket.create_connection(self.address, timeout=REQUEST_TIMEOUT_S)
        except OSError:
            client.close()
            return
        with self._lock:
            if self.stalled:
                client.close()
                upstream.close()
                return
            self._sockets.update((client, upstream))
        waiting_since: float | None = None
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(client, selectors.EVENT_READ, upstream)
                selector.register(upstream, selectors.EVENT_READ, client)
                while True:
                    ready = selector.select(timeout=_POLL_S * 10)
                    for key, _ in ready:
                        source = key.fileobj
                        assert isinstance(source, socket.socket)
                        data = source.recv(65536)
                        if not data:
                            return
                        key.data.sendall(data)
                        if source is client:
                            waiting_since = waiting_since or time.monotonic()
                        else:
                            waiting_since = None
                    if waiting_since and time.monotonic() - waiting_since > REQUEST_TIMEOUT_S:
                        self._stall()
                        return
                    if self.stalled:
                        return
        except OSError:
            return
        finally:
            for sock in (client, upstream):
                with suppress(OSError):
                    sock.close()
            with self._lock:
                self._sockets.difference_update((client, upstream))

    def _refuse(self, client: socket.socket) -> None:
        """Answer a connection made after the stall without the backend: a Redis client
        gets an error reply to each command (at once, so its request fails and the compile
        goes on); other protocols, a closed connection."""
        with client:
            if not self.redis:
                return
            client.settimeout(REQUEST_TIMEOUT_S)
            buffer = b""
            try:
                while data := client.recv(65536):
                    buffer += data
                    while (parsed := _resp_command(buffer)) is not None:
                        name, buffer = parsed
                        client.sendall(_RESP_REPLIES.get(name.upper(), _RESP_STALLED))
            except OSError:
                return

    def _stall(self) -> None:
        with self._lock:
            if self.stalled:
                return
            self.stalled = True
        self._hang_up()
        self.on_stall()

    def _hang_up(self) -> None:
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop listening and close every relayed connection."""
        with suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
        with suppress(OSError):
            self._listener.close()
        self._hang_up()


def _host_port(value: str) -> tuple[str, int] | None:
    url = urlsplit(value if "://" in value else f"tcp://{value}")
    if url.scheme.startswith("unix") or url.scheme.endswith("+unix") or not url.hostname:
        return None
    try:
        port = url.port or _DEFAULT_PORTS.get(url.scheme)
    except ValueError:
        return None
    return None if port is None else (url.hostname, port)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=_POLL_S * 10):
            return True
    except OSError:
        return False


def _last_error(log: IO[bytes]) -> str:
    try:
        log.seek(0)
        text = log.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [""])[0].removeprefix("sccache: error: ")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=_CALL_TIMEOUT_S)


# --- ccache -----------------------------------------------------------------------------


def _ccache_stats_log(env: dict[str, str]) -> Path:
    """Point ccache's per-call statistics log (`CCACHE_STATSLOG`) at a new file of ours."""
    handle, name = tempfile.mkstemp(prefix="kernelpack-ccache-", suffix=".log")
    os.close(handle)
    env["CCACHE_STATSLOG"] = name
    return Path(name)


def _ccache_stats(log: Path, env: Mapping[str, str]) -> CacheStats | None:
    """Count the compiles of the stats log: `# <file>` starts one call's counters."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    calls: list[set[str]] = []
    for line in text.splitlines():
        if line.startswith("#"):
            calls.append(set())
        elif calls and line.strip():
            calls[-1].add(line.strip())
    compiles = [c for c in calls if not c & _CCACHE_NOT_COMPILES]
    hits = sum(1 for c in compiles if c & _CCACHE_HITS)
    remote = sum(1 for c in compiles if c & _CCACHE_HITS and "remote_storage_hit" in c)
    return CacheStats(
        launcher="ccache",
        backend=_ccache_backend(env.get("CCACHE_REMOTE_STORAGE", "")),
        hits=hits,
        misses=len(compiles) - hits,
        remote_hits=remote,
        local_hits=hits - remote,
        errors=sum(1 for c in compiles if c & _CCACHE_ERRORS),
        read_only=env.get("CCACHE_READONLY", "").lower() in ("1", "true", "yes"),
    )


# ccache calls that compile nothing (a link or preprocessing through the launcher).
_CCACHE_NOT_COMPILES = frozenset({"called_for_link", "called_for_preprocessing", "no_input_file"})
_CCACHE_HITS = frozenset({"direct_cache_hit", "preprocessed_cache_hit"})
_CCACHE_ERRORS = frozenset({"remote_storage_error", "remote_storage_timeout", "internal_error"})


def _ccache_backend(remote: str) -> str:
    """ "local", or "local+redis" (+http, +file) for `CCACHE_REMOTE_STORAGE` backends."""
    schemes = [urlsplit(url).scheme or "remote" for url in remote.split()]
    return "+".join(["local", *dict.fromkeys(schemes)])


def _call(argv: list[str], env: Mapping[str, str], *, text: bool = False) -> str | None:
    """Run a launcher command with a bounded wait; its stdout, or None when it failed."""
    try:
        proc = subprocess.run(
            argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_CALL_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.decode("utf-8", "replace") if text else ""
