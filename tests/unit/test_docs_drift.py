"""The docs describe what exists: the files `kernelpack new` writes, and the CLI's defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelpack.cli import main
from kernelpack.toolchain import environment

DOCS = Path(__file__).parents[2] / "docs"


def _scaffold_listing() -> list[str]:
    """The `my-ops/...` file names in docs/release.md's scaffold listing."""
    text = (DOCS / "release.md").read_text(encoding="utf-8")
    return re.findall(r"^my-ops/(\S+)\s", text, re.MULTILINE)


def test_release_docs_list_exactly_the_files_new_writes(tmp_path: Path) -> None:
    root = tmp_path / "my-ops"
    assert main(["new", str(root), "--kernel", "NAME"]) == 0
    written = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert sorted(_scaffold_listing()) == written


def test_docs_name_no_python_file_that_the_example_package_lacks() -> None:
    example = Path(__file__).parents[2] / "examples" / "llm_ops"
    named = re.findall(r"`(llm_ops/[\w/]+\.py)`", (DOCS / "llm_ops.md").read_text("utf-8"))
    assert [name for name in named if not (example / name).is_file()] == []


def test_build_help_and_docs_agree_on_the_wheel_folder_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    out = capsys.readouterr().out
    option = " ".join(out[out.index("--wheel-dir DIR  ") :].split("\n  -")[0].split())
    documented = re.search(
        r"`--wheel-dir DIR` \(default `([^`]+)`\)", (DOCS / "build.md").read_text("utf-8")
    )
    assert documented is not None
    assert f"(default: {documented.group(1)})" in option


def test_build_docs_variable_table_is_generated_from_the_declarations() -> None:
    text = (DOCS.parent / environment.DOCS).read_text(encoding="utf-8")
    assert environment.docs_text(text) == text, (
        "run: python -m kernelpack.toolchain.environment --write"
    )


def test_variable_table_check_fails_on_a_stale_table(tmp_path: Path) -> None:
    page = tmp_path / environment.DOCS
    page.parent.mkdir(parents=True)
    current = (DOCS.parent / environment.DOCS).read_text(encoding="utf-8")
    page.write_text(current.replace("| `MAX_JOBS` |", "| `MAX_JOB` |"), encoding="utf-8")
    assert environment.main([str(tmp_path), "--check"]) == 1
    assert environment.main([str(tmp_path), "--write"]) == 0
    assert page.read_text(encoding="utf-8") == current
