"""`ninja.pending`: the steps a build is about to run, from ninja's own dry run."""

from __future__ import annotations

import os
from pathlib import Path

from kernelpack.builder import ninja
from kernelpack.builder.ninja import Step

GRAPH = """\
rule copy
  command = cp $in $out
  description = nvcc $out
build obj/k/a.o: copy a.cu
build obj/k/b.o: copy b.cu
"""


def test_lists_the_steps_ninja_would_run_and_none_once_built(tmp_path: Path) -> None:
    (tmp_path / "build.ninja").write_text(GRAPH)
    (tmp_path / "a.cu").write_text("a")
    (tmp_path / "b.cu").write_text("b")
    env = {**os.environ, "NINJA_STATUS": "[%p] "}  # the user's own status format is ignored
    assert ninja.pending(tmp_path, env) == (
        Step("nvcc", "obj/k/a.o", 0.0),
        Step("nvcc", "obj/k/b.o", 0.0),
    )
    ninja.run(tmp_path, jobs=1, env=env, quiet=True)
    assert ninja.pending(tmp_path, env) == ()


def test_a_broken_graph_is_unsure(tmp_path: Path) -> None:
    (tmp_path / "build.ninja").write_text("build x: nosuchrule\n")
    assert ninja.pending(tmp_path, dict(os.environ)) is None
