"""kernelpack on a checkout of Hugging Face's kernels-community: check, build, own tests.

    python benchmarks/corpus.py CHECKOUT [--build] [--test] [--only a,b] [--skip a,b]
        [--arch 9.0] [--backend cuda|cpu] [--jobs N] [--timeout S] [--work DIR]
        [--site DIR ...] [--python PY] [--out FILE]
    python benchmarks/corpus.py --markdown FILE.json [FILE.json ...] [--into DOC]

For every folder of CHECKOUT holding a `build.toml` (sorted by name):

- check (always): `kernelpack check` in a subprocess (its exit code and error line), and the
  project as kernelpack reads it: the format (`edition 5`, `v4`, `v3`, `v2`), the backends it
  lists, its kernels' backends, and every kernel kernelpack skips with the reason.
- `--build`: a copy of the project in `--work` is built into a wheel (`kernelpack build -v`,
  `TORCH_CUDA_ARCH_LIST=--arch`, `--jobs`), with the seconds, the memory-plan line, and each
  library's status from the wheel's build record. With `--backend cpu`, only the CPU library
  (`KERNELPACK_KERNELS=_ops_cpu`) and Python-only (`[torch-noarch]`) projects are built; a
  project with no CPU kernel is left out with that reason. When the project's tests load it
  through `kernels.get_kernel` (and `--test`), the Hub export is written too.
- `--test`: the project's own `tests/` run with pytest (`--python`, default this interpreter),
  as they expect to be run: the wheel installed into a folder of its own on `PYTHONPATH`
  (`import <name>`), the Hub export named by `LOCAL_KERNELS` for every `get_kernel` repo id
  of the project (`kernels-community/<name>`, `[general.hub] repo-id`). `--site DIR` adds a
  folder of carried packages (kernels, pytest, einops, kernelpack's own dependencies, …) to
  `PYTHONPATH` of every step: nothing is downloaded. Passed/failed/skipped come from
  pytest's JUnit XML.

The JSON (`--out`, default `benchmarks/results/corpus-<machine>.json`) is rewritten after each
project and merged with what it already holds, so runs in bounded steps (the heavy projects
in steps of their own) add up, and a killed run keeps what it had. A Markdown table goes
beside it (`.md`); `--markdown` prints one table from several result files (a CPU run and a
GPU run side by side) and, with `--into docs/migrating.md`, puts it between that page's
`<!-- corpus table … -->` and `<!-- end corpus table -->` lines. The machine is described
without its name: CPU count, memory, GPU and driver, Python, torch, nvcc.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from kernelpack.errors import KernelpackError  # noqa: E402
from kernelpack.project import buildtoml  # noqa: E402
from kernelpack.project._toml import read_toml  # noqa: E402
from kernelpack.project.locate import locate  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
_GET_KERNEL = re.compile(r"get_(?:local_)?kernel\(\s*[\"']([\w.-]+/[\w.-]+)[\"']")
_TAIL = 4000
_BEGIN, _END = "<!-- corpus table", "<!-- end corpus table -->"
_DEP_DIR = re.compile(r"KERNELPACK_[A-Z0-9_]+_DIR")


# -- the machine --------------------------------------------------------------------------------


def _output(argv: Sequence[str], timeout: float = 30) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def describe_machine(python: str) -> dict[str, Any]:
    """What the results depend on, without the machine's name."""
    probe = (
        "import json, torch; print(json.dumps({'torch': torch.__version__, "
        "'torch_cuda': torch.version.cuda}))"
    )
    torch_line = _output([python, "-c", probe], timeout=120)
    machine: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
        "arch": platform.machine(),
        "python": _output([python, "-c", "import platform; print(platform.python_version())"]),
        **(json.loads(torch_line) if torch_line else {"torch": None}),
    }
    nvcc = _output(["nvcc", "--version"])
    if nvcc:
        found = re.search(r"release [\d.]+, V([\d.]+)", nvcc)
        machine["nvcc"] = found.group(1) if found else nvcc.splitlines()[-1]
    gpus = _output(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    if gpus:
        names = [line.split(",")[0].strip() for line in gpus.splitlines()]
        machine["gpus"] = f"{len(names)} x {names[0]}"
        machine["driver"] = gpus.splitlines()[0].split(",")[-1].strip()
    return machine


def machine_label(machine: dict[str, Any]) -> str:
    """`h200`, `cpu`: the default result file's suffix."""
    gpus = machine.get("gpus")
    if not gpus:
        return "cpu"
    model = re.findall(r"\b([A-Z]+\d+\w*)\b", gpus.split(" x ", 1)[-1])
    return model[-1].lower() if model else "gpu"


# -- processes ----------------------------------------------------------------------------------


def _run(
    argv: Sequence[str], *, cwd: Path, env: dict[str, str], log: Path, timeout: float
) -> tuple[int | None, float]:
    """Run `argv` with its output in `log`; (exit code or None on timeout, seconds). A timed
    out run is killed with its whole process group (ninja, nvcc, pytest workers)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log.open("w") as out:
        process = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code: int | None = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = None
    return code, round(time.monotonic() - started, 1)


def _last_error(log: Path) -> str | None:
    lines = [line.strip() for line in _tail(log).splitlines() if line.strip()]
    for line in reversed(lines):
        if "error" in line.lower():
            return line[:300]
    return lines[-1][:300] if lines else None


def _tail(log: Path) -> str:
    try:
        with log.open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - _TAIL))
            return file.read().decode(errors="replace")
    except OSError:
        return ""


# -- check --------------------------------------------------------------------------------------


def read_project(folder: Path) -> dict[str, Any]:
    """The project as kernelpack reads it: format, backends, kernels and skips."""
    facts = buildtoml.read(folder / buildtoml.BUILD_TOML)
    entry: dict[str, Any] = {
        "format": facts.format,
        "backends": list(facts.backends),
        "noarch": facts.noarch,
        "kernel_backends": sorted({k.backend for k in facts.kernels}),
        "repo_id": _repo_id(folder),
    }
    manifest = locate(folder).load_manifest()
    entry["libraries"] = [k.name for k in manifest.kernels if k.skip is None]
    entry["skips"] = [f"{k.name}: {k.skip.message}" for k in manifest.kernels if k.skip]
    return entry


def _repo_id(folder: Path) -> str | None:
    hub = _general(folder).get("hub")
    repo = hub.get("repo-id") if isinstance(hub, dict) else None
    return repo if isinstance(repo, str) else None


def _general(folder: Path) -> dict[str, Any]:
    general = read_toml(folder / buildtoml.BUILD_TOML).get("general")
    return general if isinstance(general, dict) else {}


def check_project(folder: Path, env: dict[str, str], logs: Path) -> dict[str, Any]:
    """`kernelpack check` (exit code, error line) and the project as read."""
    log = logs / f"{folder.name}-check.log"
    argv = [sys.executable, "-m", "kernelpack", "check", str(folder)]
    code, seconds = _run(argv, cwd=folder, env=env, log=log, timeout=300)
    result: dict[str, Any] = {"exit": code, "seconds": seconds}
    if code != 0:
        result["error"] = _last_error(log)
        return {"check": result}
    try:
        return {"check": result, **read_project(folder)}
    except KernelpackError as exc:
        result["error"] = f"read in process: {str(exc).splitlines()[0]}"
        return {"check": result}


# -- build --------------------------------------------------------------------------------------


def _copy(folder: Path, work: Path) -> Path:
    copy = work / "src" / folder.name
    shutil.copytree(
        folder,
        copy,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns(".git", "build", "dist", "__pycache__"),
    )
    return copy


def _record(wheel: Path) -> dict[str, Any]:
    """Each library's status (and skip reason code) from the wheel's build record."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith("/_kernelpack.json")]
        if not names:
            return {}
        record = json.loads(archive.read(min(names, key=len)))
    kernels: dict[str, str] = {}
    for name, entry in record.get("kernels", {}).items():
        reason = entry.get("reason") or {}
        status = entry.get("status", "?")
        kernels[name] = f"{status} ({reason['code']})" if reason.get("code") else status
    return kernels


def _plan_line(log: Path) -> str | None:
    with log.open(errors="replace") as file:
        for line in file:
            if line.startswith("kernelpack: plan:"):
                return line.removeprefix("kernelpack: plan:").strip()
    return None


def build_project(
    folder: Path, entry: dict[str, Any], args: argparse.Namespace, env: dict[str, str]
) -> dict[str, Any]:
    """Build a copy of the project into a wheel (and the Hub export when its tests need it)."""
    libraries = entry.get("libraries", [])
    env = {**env, "TORCH_CUDA_ARCH_LIST": args.arch}
    if args.backend == "cpu" and not entry.get("noarch"):
        if buildtoml.CPU_KERNEL not in libraries:
            return {"status": "not-run", "reason": "no CPU kernel (CUDA build: GPU machine)"}
        env["KERNELPACK_KERNELS"] = buildtoml.CPU_KERNEL
    elif not entry.get("noarch") and not {buildtoml.KERNEL, buildtoml.CPU_KERNEL} & set(libraries):
        return {"status": "not-run", "reason": "no CUDA or CPU kernel kernelpack builds"}
    copy = _copy(folder, args.work)
    dist = args.work / "dist" / folder.name
    shutil.rmtree(dist, ignore_errors=True)
    log = args.work / "logs" / f"{folder.name}-build.log"
    argv = [sys.executable, "-m", "kernelpack", "build", str(copy), "--wheel-dir", str(dist)]
    argv += ["-v", "-j", str(args.jobs)]
    code, seconds = _run(argv, cwd=copy, env=env, log=log, timeout=args.timeout)
    result: dict[str, Any] = {"seconds": seconds, "plan": _plan_line(log), "log": str(log)}
    result.update(arch=args.arch, backend=args.backend, jobs=args.jobs)
    wheels = sorted(dist.glob("*.whl"))
    if code != 0 or not wheels:
        result["status"] = "timeout" if code is None else "failed"
        result["reason"] = (
            f"timed out after {args.timeout:.0f} s" if code is None else _last_error(log)
        )
        return result
    result.update(status="built", wheel=wheels[0].name, kernels=_record(wheels[0]))
    if args.test and _test_repo_ids(copy, entry):
        result["hub"] = export(copy, args, env)
    return result


def export(copy: Path, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    """`kernelpack export --hub` of the built copy: seconds and the variants written."""
    out = args.work / "hub" / copy.name
    shutil.rmtree(out, ignore_errors=True)
    log = args.work / "logs" / f"{copy.name}-export.log"
    argv = [sys.executable, "-m", "kernelpack", "export", "--hub", str(out), str(copy)]
    code, seconds = _run(
        [*argv, "-j", str(args.jobs)], cwd=copy, env=env, log=log, timeout=args.timeout
    )
    if code != 0:
        reason = f"timed out after {args.timeout:.0f} s" if code is None else _last_error(log)
        return {"status": "failed", "seconds": seconds, "reason": reason}
    variants = sorted(p.name for p in (out / "build").iterdir())
    return {"status": "exported", "seconds": seconds, "variants": variants, "path": str(out)}


# -- test ---------------------------------------------------------------------------------------


def _test_repo_ids(copy: Path, entry: dict[str, Any]) -> list[str]:
    """The repo ids the project's tests load through `kernels.get_kernel` that name this
    project (`kernels-community/<name>`, its `[general.hub] repo-id`)."""
    tests = copy / "tests"
    if not tests.is_dir():
        return []
    found: dict[str, None] = {}
    for file in sorted(tests.rglob("*.py")):
        for repo in _GET_KERNEL.findall(file.read_text(errors="replace")):
            if repo.rsplit("/", 1)[-1] == copy.name or repo == entry.get("repo_id"):
                found[repo] = None
    return list(found)


def _junit(path: Path) -> dict[str, Any] | None:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    first = None
    for case in root.iter("testcase"):
        for tag in ("failure", "error"):
            found = case.find(tag)
            if found is not None and first is None:
                message = (found.get("message") or "").strip().splitlines()
                first = f"{case.get('name')}: {message[0] if message else tag}"[:300]
    failed = counts["failures"] + counts["errors"]
    return {
        "passed": counts["tests"] - failed - counts["skipped"],
        "failed": failed,
        "skipped": counts["skipped"],
        "first_failure": first,
    }


def run_tests(
    folder: Path, entry: dict[str, Any], args: argparse.Namespace, env: dict[str, str]
) -> dict[str, Any]:
    """The project's own tests, against the wheel (installed in a folder of its own) and the
    Hub export (through `LOCAL_KERNELS`)."""
    built = entry.get("build", {})
    copy = args.work / "src" / folder.name
    if not (copy / "tests").is_dir():
        return {"status": "none", "reason": "the project has no tests/"}
    if built.get("status") != "built":
        return {"status": "not-run", "reason": "not built"}
    site = args.work / "site" / folder.name
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    with zipfile.ZipFile(args.work / "dist" / folder.name / built["wheel"]) as wheel:
        wheel.extractall(site)  # a wheel's purelib/platlib root is the archive root
    env = {**env, "PYTHONPATH": os.pathsep.join([str(site), env["PYTHONPATH"]])}
    env["HF_HUB_OFFLINE"] = "1"
    hub = built.get("hub") or {}
    mode = "import"
    if hub.get("status") == "exported":
        repos = _test_repo_ids(copy, entry)
        env["LOCAL_KERNELS"] = ":".join(f"{repo}={hub['path']}" for repo in repos)
        mode = "get_kernel"
    junit = args.work / "logs" / f"{folder.name}-junit.xml"
    junit.unlink(missing_ok=True)
    log = args.work / "logs" / f"{folder.name}-test.log"
    argv = [args.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]
    code, seconds = _run([*argv, "tests"], cwd=copy, env=env, log=log, timeout=args.timeout)
    result: dict[str, Any] = {"mode": mode, "seconds": seconds, "log": str(log)}
    counts = _junit(junit)
    if counts is not None:
        result.update(counts)
    if code is None:
        result.update(status="timeout", reason=f"timed out after {args.timeout:.0f} s")
    elif counts is None:
        result.update(status="error", reason=_last_error(log))
    else:
        result["status"] = "passed" if code == 0 else "failed"
        if code != 0:
            result["reason"] = counts.get("first_failure") or _last_error(log)
    return result


# -- results ------------------------------------------------------------------------------------


def load(path: Path) -> dict[str, Any]:
    if path.is_file():
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    return {"projects": {}}


def save(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    results["projects"] = dict(sorted(results["projects"].items()))
    temp = path.with_name(f".{path.name}.partial")
    temp.write_text(json.dumps(results, indent=2) + "\n")
    temp.replace(path)
    path.with_suffix(".md").write_text(markdown([results], [_label(path)]))


def _label(path: Path) -> str:
    return path.stem.removeprefix("corpus-")


def _backends(entry: dict[str, Any]) -> str:
    if "backends" not in entry:
        return "?"
    listed = ", ".join(entry["backends"])
    return f"{listed} (noarch)" if entry.get("noarch") else listed


def _check_cell(entry: dict[str, Any]) -> str:
    check_ = entry.get("check", {})
    return "ok" if check_.get("exit") == 0 else f"exit {check_.get('exit')}"


def _build_cell(entry: dict[str, Any]) -> tuple[str, str]:
    built = entry.get("build")
    if not built:
        return "", ""
    seconds = f"{built['seconds']:.0f}" if "seconds" in built else ""
    status = built.get("status", "")
    if status == "built":
        libs = [n for n, s in built.get("kernels", {}).items() if s == "built"]
        status = f"built ({', '.join(libs)})" if libs else "built (Python only)"
        hub = built.get("hub")
        if hub:
            status += f"; hub {hub.get('status')}"
    return status, seconds


def _test_cell(entry: dict[str, Any]) -> str:
    tested = entry.get("test")
    if not tested:
        return ""
    if "passed" in tested:
        return f"{tested['passed']}/{tested['failed']}/{tested['skipped']}"
    return str(tested.get("status", ""))


def _reason(entry: dict[str, Any]) -> str:
    error = entry.get("check", {}).get("error")
    if error:
        return str(error)
    notes = []
    for part in ("build", "test"):
        step = entry.get(part) or {}
        if step.get("reason") and step.get("status") not in ("built", "passed"):
            notes.append(f"{part}: {step['reason']}")
    return "; ".join([*notes, *_skips(entry.get("skips") or [])])


def _skips(skips: Sequence[str]) -> list[str]:
    """The skip notes, kernels of other backends grouped: `not built: metal (a, b); rocm (c)`."""
    others: dict[str, list[str]] = {}
    rest: list[str] = []
    for skip in skips:
        name, _, message = skip.partition(": ")
        found = re.match(r'backend = "(\w+)"', message)
        if found:
            others.setdefault(found.group(1), []).append(name)
        elif "declares no CUDA kernel" not in message:
            rest.append(skip)
    if others:
        grouped = "; ".join(f"{b} ({', '.join(names)})" for b, names in sorted(others.items()))
        rest.insert(0, f"not built (kernelpack builds CUDA and CPU kernels): {grouped}")
    return rest


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(runs: Sequence[dict[str, Any]], labels: Sequence[str]) -> str:
    """One table: each project's format, backends and check, then build and tests per run."""
    header = ["project", "format", "backends", "check"]
    for label in labels:
        header += [f"build ({label})", "s", f"tests p/f/s ({label})"]
    header.append("reason / skips")
    lines = []
    for run, label in zip(runs, labels, strict=True):
        lines.append(f"- {label}: {describe(run.get('machine', {}))}")
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    names = sorted({name for run in runs for name in run.get("projects", {})})
    for name in names:
        entries = [run.get("projects", {}).get(name, {}) for run in runs]
        first = next((e for e in entries if "check" in e), entries[0])
        cells = [name, first.get("format", "?"), _backends(first), _check_cell(first)]
        reasons: list[str] = []
        for entry in entries:
            status, seconds = _build_cell(entry)
            cells += [status, seconds, _test_cell(entry)]
            reason = _reason(entry)
            if reason and reason not in reasons:
                reasons.append(reason)
        cells.append(" / ".join(reasons)[:400])
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    totals = []
    for run, label in zip(runs, labels, strict=True):
        projects = run.get("projects", {}).values()
        ok = sum(1 for e in projects if e.get("check", {}).get("exit") == 0)
        built = sum(1 for e in projects if (e.get("build") or {}).get("status") == "built")
        tried = sum(
            1 for e in projects if (e.get("build") or {}).get("status") not in (None, "not-run")
        )
        passed = sum((e.get("test") or {}).get("passed", 0) for e in projects)
        failed = sum((e.get("test") or {}).get("failed", 0) for e in projects)
        totals.append(
            f"- {label}: check {ok}/{len(projects)} exit 0; built {built}/{tried} attempted; "
            f"tests {passed} passed, {failed} failed"
        )
    return "\n".join([*lines, *totals, "", *rows]) + "\n"


def describe(machine: dict[str, Any]) -> str:
    parts = [f"{machine.get('cpus', '?')} CPUs, {machine.get('memory_gib', '?')} GiB"]
    if machine.get("gpus"):
        parts.append(f"{machine['gpus']} (driver {machine.get('driver', '?')})")
    else:
        parts.append("no GPU")
    parts.append(f"Python {machine.get('python', '?')}, torch {machine.get('torch', '?')}")
    if machine.get("nvcc"):
        parts.append(f"nvcc {machine['nvcc']}")
    return ", ".join(parts)


def replace_table(doc: Path, table: str) -> None:
    """Put `table` between DOC's `<!-- corpus table` line and `<!-- end corpus table -->`."""
    lines = doc.read_text().splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith(_BEGIN)), None)
    end = next((i for i, line in enumerate(lines) if line.startswith(_END)), None)
    if start is None or end is None or end < start:
        raise SystemExit(f"corpus: {doc} has no '{_BEGIN} …' … '{_END}' lines")
    while not lines[start].rstrip().endswith("-->"):
        start += 1  # the opening comment may run over several lines
    doc.write_text("".join([*lines[: start + 1], table, *lines[end:]]))


# -- main ---------------------------------------------------------------------------------------


def _names(value: str | None) -> list[str]:
    return [n.strip() for n in (value or "").split(",") if n.strip()]


def projects(checkout: Path, only: Sequence[str], skip: Iterable[str]) -> list[Path]:
    """The checkout's projects: every one sorted by name, or those of `only` in its order
    (the heavy ones last in a bounded run), less `skip`."""
    skip = set(skip)
    found = {p.parent.name: p.parent for p in checkout.glob(f"*/{buildtoml.BUILD_TOML}")}
    unknown = set(only) - set(found)
    if unknown:
        raise SystemExit(f"corpus: no build.toml project named {', '.join(sorted(unknown))}")
    names = list(dict.fromkeys(only)) if only else sorted(found)
    return [found[name] for name in names if name not in skip]


def _environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The steps' environment: this one without kernelpack's and the Hub loader's settings
    (each step sets its own), except the dependency folders (`KERNELPACK_<NAME>_DIR`, e.g.
    a pinned CUTLASS release's headers on a machine without network), which are inputs."""
    return {
        k: v
        for k, v in environ.items()
        if not k.startswith(("KERNELPACK_", "LOCAL_")) or _DEP_DIR.fullmatch(k)
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("checkout", type=Path, nargs="?", help="a kernels-community checkout")
    parser.add_argument("--build", action="store_true", help="build each project (a wheel)")
    parser.add_argument("--test", action="store_true", help="build, then run its own tests")
    parser.add_argument("--only", metavar="NAMES", help="these projects only (a,b)")
    parser.add_argument("--skip", metavar="NAMES", help="not these projects (a,b)")
    parser.add_argument("--arch", default="9.0", help="TORCH_CUDA_ARCH_LIST (default 9.0)")
    parser.add_argument("--backend", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--jobs", type=int, default=2, help="parallel compile jobs")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per step")
    parser.add_argument("--work", type=Path, help="copies, wheels, exports, logs (kept)")
    parser.add_argument("--site", action="append", default=[], help="carried packages")
    parser.add_argument("--python", default=sys.executable, help="the tests' interpreter")
    parser.add_argument("--out", type=Path, help="the JSON (default corpus-<machine>.json)")
    parser.add_argument("--markdown", type=Path, nargs="+", metavar="JSON")
    parser.add_argument(
        "--into", type=Path, metavar="DOC", help="with --markdown: replace the table in DOC"
    )
    args = parser.parse_args(argv)
    args.build = args.build or args.test  # the tests run against this run's build
    if args.markdown:
        text = markdown([load(p) for p in args.markdown], [_label(p) for p in args.markdown])
        if args.into:
            replace_table(args.into, text)
        print(text, end="")
        return 0
    if args.checkout is None or not args.checkout.is_dir():
        parser.error("CHECKOUT: a kernels-community checkout is needed")
    machine = describe_machine(args.python)
    out = args.out or RESULTS / f"corpus-{machine_label(machine)}.json"
    args.work = (args.work or Path(tempfile.mkdtemp(prefix="kernelpack-corpus-"))).absolute()
    env = _environment(os.environ)
    sites = [str(Path(s).absolute()) for s in args.site]
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), *sites, env.get("PYTHONPATH", "")) if p
    )
    results = load(out)
    results["machine"] = machine
    commit = _output(["git", "-C", str(args.checkout), "rev-parse", "HEAD"])
    results["checkout"] = {"commit": commit}
    results["options"] = {
        "arch": args.arch,
        "backend": args.backend,
        "jobs": args.jobs,
        "build": args.build,
        "test": args.test,
    }
    chosen = projects(args.checkout.absolute(), _names(args.only), _names(args.skip))
    print(f"corpus: {len(chosen)} projects; work in {args.work}; results in {out}", flush=True)
    for folder in chosen:
        entry: dict[str, Any] = check_project(folder, env, args.work / "logs")
        if args.build and entry["check"]["exit"] == 0:
            entry["build"] = build_project(folder, entry, args, env)
        if args.test and "build" in entry:
            entry["test"] = run_tests(folder, entry, args, env)
        old = results["projects"].get(folder.name, {})
        results["projects"][folder.name] = {**old, **entry}
        save(results, out)
        summary = [_check_cell(entry), *_build_cell(entry), _test_cell(entry), _reason(entry)]
        print(f"{folder.name}: " + " | ".join(s for s in summary if s), flush=True)
    print(out.with_suffix(".md").read_text() if out.with_suffix(".md").exists() else "", end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
