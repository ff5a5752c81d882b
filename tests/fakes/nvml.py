"""A stand-in `libnvidia-ml.so.1`, compiled with gcc, for the real NVML device probe.

Its GPUs come from the environment of the process that loads it, so subprocesses (pytest-xdist
workers too) each see the machine the test describes, through kernelpack's own ctypes calls and
`CUDA_VISIBLE_DEVICES` rules: `FAKE_NVML_CAPS="9.0,8.6"` is two GPUs, `FAKE_NVML_DRIVER=13000`
the driver's CUDA version, `FAKE_NVML_INIT_FAILS=1` a driver that does not answer.
`nvml_environment(folder, caps)` is what a subprocess needs to load it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

__all__ = ["FAKE_NVML", "build_fake_nvml", "nvml_environment"]

FAKE_NVML = r"""
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
/* A stand-in libnvidia-ml.so.1: GPUs from FAKE_NVML_CAPS ("9.0,8.0"), driver FAKE_NVML_DRIVER. */
static int ncaps(void) {
    const char* caps = getenv("FAKE_NVML_CAPS");
    if (!caps || !*caps) return 0;
    int n = 1;
    for (const char* p = caps; *p; ++p) n += *p == ',';
    return n;
}
static void cap(int i, int* major, int* minor) {
    const char* p = getenv("FAKE_NVML_CAPS");
    while (i-- > 0) p = strchr(p, ',') + 1;
    sscanf(p, "%d.%d", major, minor);
}
int nvmlInit_v2(void) { return getenv("FAKE_NVML_INIT_FAILS") ? 9 : 0; }
int nvmlShutdown(void) { return 0; }
const char* nvmlErrorString(int r) { return r == 9 ? "Driver Not Loaded" : "Unknown Error"; }
int nvmlSystemGetCudaDriverVersion(int* v) { *v = atoi(getenv("FAKE_NVML_DRIVER")); return 0; }
int nvmlDeviceGetCount_v2(unsigned* n) { *n = (unsigned)ncaps(); return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** h) {
    if ((int)i >= ncaps()) return 2;
    *h = (void*)(size_t)(i + 1); return 0;
}
int nvmlDeviceGetHandleByUUID(const char* u, void** h) { return 6; }
int nvmlDeviceGetName(void* h, char* b, unsigned n) {
    snprintf(b, n, "Fake GPU %zu", (size_t)h - 1); return 0;
}
int nvmlDeviceGetUUID(void* h, char* b, unsigned n) {
    snprintf(b, n, "GPU-fake-%zu", (size_t)h - 1); return 0;
}
int nvmlDeviceGetCudaComputeCapability(void* h, int* major, int* minor) {
    cap((int)((size_t)h - 1), major, minor); return 0;
}
"""


def build_fake_nvml(folder: Path) -> Path | None:
    """Compile the stand-in into `folder/libnvidia-ml.so.1`; None when there is no gcc."""
    if shutil.which("gcc") is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nvml.c").write_text(FAKE_NVML)
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-o",
            str(folder / "libnvidia-ml.so.1"),
            str(folder / "nvml.c"),
        ],
        check=True,
    )
    return folder


def nvml_environment(folder: Path, caps: str, driver: str = "13000") -> dict[str, str]:
    """The variables that make a subprocess load the stand-in and see GPUs `caps`."""
    return {"LD_LIBRARY_PATH": str(folder), "FAKE_NVML_CAPS": caps, "FAKE_NVML_DRIVER": driver}
