"""Distributed compilation on an sccache-dist farm (a scheduler and its build servers).

`KERNELPACK_DIST_SCHEDULER=<url>` names the scheduler; its client token comes from
`KERNELPACK_DIST_TOKEN` or from the file `KERNELPACK_DIST_TOKEN_FILE` names (a project's
`[tool.kernelpack]` `dist-scheduler` and `dist-token-file` fill in what the environment does
not say: `with_settings`). The build's private sccache server then reads a private client
configuration (`client_config`): the `[dist]` table sccache-dist documents (`scheduler_url`,
`[dist.auth]` token, no hand-made toolchains: sccache packages the local compilers itself,
nvcc's included, and splits each nvcc compile into host-preprocess, cicc and ptxas steps it
can send to the servers). The file is written for one build, readable by its owner only, and
removed afterwards; the packaged toolchains stay in
`$XDG_CACHE_HOME/kernelpack/sccache-dist`, so the next build need not package them again.

Before the build uses the farm, `check()` asks the scheduler once (bounded in time): an
unreachable scheduler, a rejected token or a farm with no build server is one warning and
the build compiles locally. (sccache itself would fail every compile on a rejected token.)
A scheduler URL that is not an http(s) URL, or a token file that cannot be read, is a
`UsageError`: a mistake in the configuration, not an outage.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kernelpack.errors import UsageError
from kernelpack.toolchain.torchprobe import cache_dir

__all__ = [
    "CHECK_TIMEOUT_S",
    "SCHEDULER",
    "TOKEN",
    "TOKEN_FILE",
    "Farm",
    "FarmStats",
    "client_config",
    "with_settings",
]

SCHEDULER = "KERNELPACK_DIST_SCHEDULER"
TOKEN = "KERNELPACK_DIST_TOKEN"
TOKEN_FILE = "KERNELPACK_DIST_TOKEN_FILE"

#: Longest wait for the scheduler's answer to one request of `Farm.check`.
CHECK_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Farm:
    """A farm to compile on: its scheduler and the client token it expects."""

    scheduler: str
    """The scheduler's URL, e.g. `http://10.0.0.5:10600` (https behind a proxy)."""
    token: str = field(repr=False)
    """The client token (`client_auth = { type = "token" }` on the scheduler)."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Farm | None:
        """The farm `environ` configures; None when `KERNELPACK_DIST_SCHEDULER` is unset.

        Raises `UsageError` for a scheduler that is not an http(s) URL, a token file that
        cannot be read, or a token that is not a valid HTTP header value.
        """
        url = environ.get(SCHEDULER, "").strip()
        if not url:
            return None
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            port = -1
        if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
            raise UsageError(
                f"{SCHEDULER}={url!r} is not a scheduler URL; expected http(s)://host:port, "
                "e.g. http://10.0.0.5:10600"
            )
        token = environ.get(TOKEN, "")
        token_file = environ.get(TOKEN_FILE, "").strip()
        if not token and token_file:
            try:
                token = Path(token_file).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                why = getattr(exc, "strerror", None) or type(exc).__name__
                raise UsageError(f"{TOKEN_FILE}={token_file}: cannot read it ({why})") from None
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in token):
            source = TOKEN_FILE if token_file and not environ.get(TOKEN) else TOKEN
            raise UsageError(f"{source}: the token holds a control character (a newline?)")
        return cls(scheduler=url.rstrip("/"), token=token)

    def check(self, timeout: float = CHECK_TIMEOUT_S) -> str | None:
        """Why this farm cannot take compiles now (one phrase); None when it can.

        Asks the scheduler for its status (build servers) and sends an empty job request
        with the token: the scheduler checks the token before it reads the request, so a
        rejected token is HTTP 401 and an accepted one HTTP 400 (no job is allocated).
        """
        status_request = urllib.request.Request(
            f"{self.scheduler}/api/v1/scheduler/status", headers={"Accept": "application/json"}
        )
        try:
            with urllib.request.urlopen(status_request, timeout=timeout) as answer:
                status = json.loads(answer.read().decode("utf-8", "replace"))
        except urllib.error.HTTPError as exc:
            return f"the scheduler {self.scheduler} answered HTTP {exc.code} to a status request"
        except (OSError, ValueError) as exc:
            return f"the scheduler {self.scheduler} is unreachable ({_reason(exc)})"
        servers = status.get("num_servers") if isinstance(status, dict) else None
        if servers == 0:
            return f"the scheduler {self.scheduler} has no build server"
        request = urllib.request.Request(
            f"{self.scheduler}/api/v1/scheduler/alloc_job",
            data=b"",
            method="POST",
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/octet-stream",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout):
                pass
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                return f"the scheduler {self.scheduler} rejected the token"
            if exc.code != 400:
                return f"the scheduler {self.scheduler} answered HTTP {exc.code}"
        except OSError as exc:
            return f"the scheduler {self.scheduler} is unreachable ({_reason(exc)})"
        return None


def with_settings(
    environ: Mapping[str, str], scheduler: str | None, token_file: str | None, root: Path
) -> dict[str, str]:
    """`environ` plus a project's `[tool.kernelpack]` `dist-scheduler` / `dist-token-file`
    where the environment names none (the environment wins; a relative token file is
    relative to the project `root`, `~` expands)."""
    env = dict(environ)
    if scheduler and not env.get(SCHEDULER, "").strip():
        env[SCHEDULER] = scheduler
    if token_file and not env.get(TOKEN) and not env.get(TOKEN_FILE, "").strip():
        env[TOKEN_FILE] = str(root / Path(token_file).expanduser())
    return env


def client_config(farm: Farm, folder: Path, environ: Mapping[str, str]) -> Path:
    """Write the private sccache client configuration for `farm` into `folder` (mode 0600,
    it holds the token) and return its path; sccache reads it through `SCCACHE_CONF`."""
    toolchains = cache_dir(environ) / "sccache-dist"
    text = "\n".join(
        [
            "# Written by kernelpack for one build; removed when the build ends.",
            "[dist]",
            f"scheduler_url = {_toml_string(farm.scheduler)}",
            "toolchains = []",
            f"cache_dir = {_toml_string(str(toolchains))}",
            "",
            "[dist.auth]",
            'type = "token"',
            f"token = {_toml_string(farm.token)}",
            "",
        ]
    )
    path = folder / "sccache-client.toml"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


@dataclass(frozen=True)
class FarmStats:
    """Where one build's compile steps ran (sccache counts nvcc's cicc, ptxas and host
    steps one by one)."""

    scheduler: str
    remote: int
    """Steps compiled on a build server."""
    local: int
    """Steps compiled on this machine (those the farm could not take included)."""
    cache_hits: int
    failed_remote: int = 0
    """Steps a server failed to compile (sccache compiled them here instead)."""

    def line(self) -> str:
        """`farm http://…:10600: 12 compiled remotely, 3 locally, 40 cache hits`."""
        text = (
            f"farm {self.scheduler}: {self.remote} compiled remotely, {self.local} locally, "
            f"{self.cache_hits} cache hits"
        )
        if self.failed_remote:
            text += f" ({self.failed_remote} failed remotely and ran here)"
        return text

    def to_json(self) -> dict[str, Any]:
        """The build folder's copy (see `kernelpack.toolchain.launcher.cache.save`)."""
        return {
            "scheduler": self.scheduler,
            "remote": self.remote,
            "local": self.local,
            "cache_hits": self.cache_hits,
            "failed_remote": self.failed_remote,
        }

    @classmethod
    def from_json(cls, data: object) -> FarmStats | None:
        """What `to_json` wrote; None for anything else."""
        if not isinstance(data, dict) or not isinstance(data.get("scheduler"), str):
            return None
        counts = ("remote", "local", "cache_hits", "failed_remote")
        if not all(type(data.get(k)) is int for k in counts):
            return None
        return cls(
            scheduler=data["scheduler"],
            remote=data["remote"],
            local=data["local"],
            cache_hits=data["cache_hits"],
            failed_remote=data["failed_remote"],
        )

    @classmethod
    def from_sccache(cls, scheduler: str, stats: Mapping[str, Any], hits: int) -> FarmStats:
        """From `sccache --show-stats --stats-format=json`'s `stats` object: `compilations`
        counts every step sccache compiled, `dist_compiles` those each server compiled."""
        per_server = stats.get("dist_compiles")
        remote = (
            sum(v for v in per_server.values() if isinstance(v, int))
            if isinstance(per_server, dict)
            else 0
        )
        compiled = stats.get("compilations")
        compiled = compiled if isinstance(compiled, int) else remote
        failed = stats.get("dist_errors")
        return cls(
            scheduler=scheduler,
            remote=remote,
            local=max(0, compiled - remote),
            cache_hits=hits,
            failed_remote=failed if isinstance(failed, int) else 0,
        )


def _toml_string(text: str) -> str:
    """`text` as a TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text)


def _reason(exc: BaseException) -> str:
    inner = getattr(exc, "reason", None)
    if isinstance(inner, BaseException):
        exc = inner
    text = getattr(exc, "strerror", None) or str(inner or exc) or type(exc).__name__
    return str(text).lower()
