"""Static PEP 503 "simple" indexes: what pip and uv read from `--index-url` / `--extra-index-url`.

`<root>/index.html` lists the projects; `<root>/<project>/index.html` links every file with its
`#sha256=` fragment, `data-requires-python` (PEP 503/345, HTML-escaped) and, for a wheel, its
core metadata served beside it as `<file>.metadata` (PEP 658, announced under both the
PEP 714 name `data-core-metadata` and the older `data-dist-info-metadata`). Any static host
serves it (a folder over HTTP, GitHub Pages, S3).
"""

from __future__ import annotations

import hashlib
import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelpack_runtime.digest import file_sha256

__all__ = ["IndexFile", "write_project", "write_root"]

_HEAD = (
    "<!DOCTYPE html>\n<html>\n<head>\n"
    '<meta name="pypi:repository-version" content="1.1">\n'
    "<title>{title}</title>\n</head>\n<body>\n<h1>{title}</h1>\n"
)
_TAIL = "</body>\n</html>\n"


@dataclass(frozen=True)
class IndexFile:
    """One file of a project page; it already lies in the project's folder."""

    filename: str
    requires_python: str | None = None
    metadata: bytes | None = None
    """A wheel's METADATA (written as `<filename>.metadata`); None for other files."""


def write_project(folder: Path, project: str, files: Sequence[IndexFile]) -> None:
    """Write `folder/index.html` for `project` (its normalized name), and each wheel's
    `.metadata` file, for the files already in `folder`."""
    lines = [_HEAD.format(title=html.escape(f"Links for {project}"))]
    for item in sorted(files, key=lambda f: f.filename):
        attributes = [
            f'href="{html.escape(item.filename)}#sha256={file_sha256(folder / item.filename)}"'
        ]
        if item.requires_python:
            attributes.append(f'data-requires-python="{html.escape(item.requires_python)}"')
        if item.metadata is not None:
            (folder / f"{item.filename}.metadata").write_bytes(item.metadata)
            digest = hashlib.sha256(item.metadata).hexdigest()
            attributes.append(f'data-core-metadata="sha256={digest}"')
            attributes.append(f'data-dist-info-metadata="sha256={digest}"')
        lines.append(f"<a {' '.join(attributes)}>{html.escape(item.filename)}</a><br>\n")
    lines.append(_TAIL)
    (folder / "index.html").write_text("".join(lines), encoding="utf-8")


def write_root(root: Path, projects: Sequence[str]) -> None:
    """Write `root/index.html` linking each project's page (`<project>/`)."""
    lines = [_HEAD.format(title="Simple index")]
    for project in sorted(projects):
        name = html.escape(project)
        lines.append(f'<a href="{name}/">{name}</a><br>\n')
    lines.append(_TAIL)
    (root / "index.html").write_text("".join(lines), encoding="utf-8")
