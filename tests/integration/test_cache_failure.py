"""A compile that fails inside the compiler launcher is a cache failure, not a compile error.

The launcher is faked at the edge: a `ccache` on PATH that fails the way ccache and sccache
fail when their own cache is broken (a corrupted entry, a cache folder that became a file),
with its own error line and no compiler output. The build must say so in one warning naming
the launcher, then compile the kernel with the real nvcc without it, and exit 0.
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest

from kernelpack.builder import engine
from kernelpack.project.locate import locate

pytestmark = pytest.mark.integration

PACKAGE = Path(__file__).parent / "packages" / "kpdemo"

BROKEN_CCACHE = """#!/bin/sh
case "$1" in
  --*) exit 1 ;;
esac
echo "ccache: error: Failed to read from /cache/a/b/c.manifest: unexpected end of file" >&2
exit 1
"""


def test_a_broken_launcher_cache_is_bypassed_with_one_warning_not_reported_as_a_compile_error(
    tmp_path: Path,
) -> None:
    root = tmp_path / "kpdemo"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("build", "*.so", "_kernel*"))
    manifest = root / "kpdemo" / "kernels.toml"
    manifest.write_text(manifest.read_text().split("[addone]")[0])  # one small stable kernel
    fake = tmp_path / "bin" / "ccache"
    fake.parent.mkdir()
    fake.write_text(BROKEN_CCACHE)
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KPDEMO_", "KERNELPACK_"))}
    env["KERNELPACK_LAUNCHER"] = str(fake)
    env["CCACHE_DIR"] = str(tmp_path / "cache")
    out = io.StringIO()
    result = engine.build_project(locate(root), environ=env, stream=out, jobs=1)
    assert result.libraries["scale"].is_file()
    warnings = [line for line in out.getvalue().splitlines() if "warning" in line]
    assert len(warnings) == 1, out.getvalue()
    assert warnings[0].startswith("kernelpack: warning: ccache")
    assert "failed, not the compiler: Failed to read from /cache/a/b/c.manifest" in warnings[0]
    assert warnings[0].endswith("this build compiles without a compiler cache")
