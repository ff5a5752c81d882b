"""Fake `nvcc` executables that answer like a given CUDA release.

`install_nvcc(root, NVCC_12_4)` writes a toolkit `root/cuda-12.4/` whose `bin/nvcc` is a
shell script answering `--version`, `--list-gpu-code`, `--list-gpu-arch`, `--help` and a
`--dryrun`, plus (by default) a wrapper `root/bin/nvcc` that `exec`s it, as
`/usr/local/bin/nvcc` does on the CI machine. Put the returned folder first on PATH.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "NVCC_12_4",
    "NVCC_12_8",
    "NVCC_13_0",
    "NVCC_13_2",
    "FakeNvcc",
    "install_nvcc",
    "nvcc_script",
]


@dataclass(frozen=True)
class FakeNvcc:
    """What a fake nvcc reports: its version and the real archs it can build."""

    version: str
    """Full version, e.g. "12.4.131"."""
    codes: tuple[str, ...]
    """`sm_XX` names listed by `--list-gpu-code` (base archs only, as real nvcc does)."""
    suffixed: tuple[str, ...]
    """Extra `sm_XXa` / `sm_XXf` names only `--help` lists, as real nvcc does."""

    @property
    def release(self) -> str:
        major, minor, *_ = self.version.split(".")
        return f"{major}.{minor}"


NVCC_12_4 = FakeNvcc(
    version="12.4.131",
    codes=("sm_50", "sm_52", "sm_53", "sm_60", "sm_61", "sm_62", "sm_70", "sm_72", "sm_75",
           "sm_80", "sm_86", "sm_87", "sm_89", "sm_90"),
    suffixed=("sm_90a",),
)  # fmt: skip
NVCC_12_8 = FakeNvcc(
    version="12.8.93",
    codes=("sm_50", "sm_52", "sm_53", "sm_60", "sm_61", "sm_62", "sm_70", "sm_72", "sm_75",
           "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100", "sm_101", "sm_120"),
    suffixed=("sm_90a", "sm_100a", "sm_101a", "sm_120a"),
)  # fmt: skip
NVCC_13_0 = FakeNvcc(
    version="13.0.88",
    codes=("sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_100", "sm_110",
           "sm_103", "sm_120", "sm_121"),
    suffixed=("sm_90a", "sm_100a", "sm_100f", "sm_103a", "sm_103f", "sm_110a", "sm_110f",
              "sm_120a", "sm_120f", "sm_121a", "sm_121f"),
)  # fmt: skip

NVCC_13_2 = FakeNvcc(
    version="13.2.51",
    codes=NVCC_13_0.codes,
    suffixed=NVCC_13_0.suffixed,
)

_SCRIPT = """#!/bin/sh
# A fake nvcc {version} for kernelpack's tests. FAKE_NVCC_LOG: append each call's arguments.
if [ -n "$FAKE_NVCC_LOG" ]; then echo "$*" >> "$FAKE_NVCC_LOG"; fi
for arg in "$@"; do
  case "$arg" in
    --version)
      printf '%s\\n' "nvcc: NVIDIA (R) Cuda compiler driver" \\
        "Cuda compilation tools, release {release}, V{version}"
      exit 0 ;;
    --list-gpu-code) printf '%s\\n' {codes}; exit 0 ;;
    --list-gpu-arch) printf '%s\\n' {arches}; exit 0 ;;
    --help)
      echo "--gpu-code <code>,...   (-code)"
      echo "        Allowed values for this option:  {allowed}."
      exit 0 ;;
    --dryrun)
      echo "#$ _HERE_={here}" >&2
      echo "#$ TOP={here}/.." >&2
      exit 0 ;;
  esac
done
echo "nvcc fatal   : No input files specified; use option --help for more information" >&2
exit 1
"""


def nvcc_script(nvcc: FakeNvcc, here: str) -> str:
    """The text of a fake nvcc answering as `nvcc`, whose dry run names `here` (a shell word)
    as its folder."""
    computes = [code.replace("sm_", "compute_") for code in nvcc.codes]
    every = sorted({*nvcc.codes, *nvcc.suffixed})
    allowed = ",".join(
        f"'{name}'" for name in [*every, *(n.replace("sm_", "compute_") for n in every)]
    )
    return _SCRIPT.format(
        version=nvcc.version,
        release=nvcc.release,
        codes=" ".join(nvcc.codes),
        arches=" ".join(computes),
        allowed=allowed,
        here=here,
    )


def install_nvcc(root: Path, nvcc: FakeNvcc = NVCC_12_4, *, wrapper: bool = True) -> Path:
    """Write a fake toolkit `root/cuda-<release>` and return the folder to put on PATH:
    `root/bin` holding an `exec` wrapper, or the toolkit's own `bin` without `wrapper`."""
    toolkit = root / f"cuda-{nvcc.release}"
    bindir = toolkit / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    (toolkit / "include").mkdir(exist_ok=True)
    (toolkit / "include" / "cuda_runtime.h").write_text("/* fake */\n")
    real = bindir / "nvcc"
    real.write_text(nvcc_script(nvcc, str(bindir)))
    real.chmod(0o755)
    if not wrapper:
        return bindir
    outer = root / "bin"
    outer.mkdir(exist_ok=True)
    wrapped = outer / "nvcc"
    wrapped.write_text(f'#!/bin/sh\nexec {shlex.quote(str(real))} "$@"\n')
    wrapped.chmod(0o755)
    return outer
