"""Fresh virtual environments that hold torch, made in seconds, and the real pip run for them.

`torch_venv(folder)` makes a venv without pip whose site-packages links (not copies) torch and
every distribution torch requires from this interpreter's site-packages (their `.dist-info`
folders are copied: uv reads no metadata through a linked folder): a fresh environment
with the CUDA torch of this machine and nothing else, instead of a 5 GB install. pip is this
interpreter's, run with `--python` and none of this machine's pip configuration.
`overlay_venv(folder)` is a venv (with pip) that sees this interpreter's whole site-packages.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

__all__ = [
    "installed",
    "new_venv",
    "overlay_venv",
    "pip",
    "pip_env",
    "purelib",
    "requirements_of",
    "torch_venv",
]


def pip_env() -> dict[str, str]:
    """pip with no configuration files, indexes or find-links of this machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def pip(python: Path, *args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The real pip, run for the venv of `python` (which needs no pip of its own)."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), *map(str, args)],
        capture_output=True,
        text=True,
        env=pip_env(),
        check=check,
        timeout=300,
    )


def requirements_of(top: str) -> set[str]:
    """Distributions `top` needs (itself included), from this interpreter's metadata."""
    present = {canonicalize_name(d.metadata["Name"]): d for d in importlib.metadata.distributions()}
    needed: set[str] = set()
    todo: list[tuple[str, frozenset[str]]] = [(top, frozenset())]
    visited: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        key = canonicalize_name(name)
        if (key, extras) in visited or key not in present:
            continue
        visited.add((key, extras))
        needed.add(key)
        environments = [{"extra": e} for e in extras] or [{"extra": ""}]
        for text in present[key].requires or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate(e) for e in environments):
                todo.append((req.name, frozenset(req.extras)))
    return needed


def purelib(python: Path) -> Path:
    """The site-packages folder of interpreter `python`."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    found = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return Path(found.stdout.strip())


def new_venv(folder: Path) -> tuple[Path, Path]:
    """A new venv without pip: (its python, its site-packages)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", folder], check=True)
    python = folder / "bin" / "python"
    return python, purelib(python)


def overlay_venv(folder: Path) -> Path:
    """A venv at `folder` that also sees this interpreter's site-packages; returns `folder`."""
    subprocess.run([sys.executable, "-m", "venv", folder], check=True)
    ours = sysconfig.get_paths()["purelib"]
    site = purelib(folder / "bin" / "python")
    (site / "zz_parent_env.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return folder


def torch_venv(folder: Path) -> Path:
    """A fresh venv at `folder` holding only torch and what torch requires, as installed here
    (each top-level entry linked). Returns its python."""
    python, site = new_venv(folder)
    needed = requirements_of("torch")
    entries: set[str] = set()
    for dist in importlib.metadata.distributions():
        if canonicalize_name(dist.metadata["Name"]) in needed:
            for file in dist.files or []:
                if not str(file).startswith(".."):
                    entries.add(file.parts[0])
    ours = Path(importlib.metadata.distribution("torch").locate_file(""))
    for entry in sorted(entries):
        if not (ours / entry).exists() or (site / entry).exists():
            continue
        if entry.endswith(".dist-info"):  # uv reads no metadata through a linked folder
            shutil.copytree(ours / entry, site / entry)
        else:
            (site / entry).symlink_to(ours / entry)
    return python


def installed(python: Path) -> set[str]:
    """The normalized names of the distributions the venv of `python` holds."""
    listing = json.loads(pip(python, "list", "--format", "json").stdout)
    return {canonicalize_name(item["name"]) for item in listing}
