"""`kernelpack ci`: the workflow that builds, uploads and pins a package's wheels."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from kernelpack import __version__
from kernelpack.cli import main
from kernelpack.errors import UsageError
from kernelpack.release.workflow import gpu_count_of

OUT = Path(".github/workflows/build_kernels.yaml")


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository root (the working folder) holding a kernel project under deps/my-ops."""
    monkeypatch.chdir(tmp_path)
    assert main(["new", "deps/my-ops", "--kernel", "scale"]) == 0
    return tmp_path


def _as_submodule(repo: Path) -> None:
    (repo / ".gitmodules").write_text(
        '[submodule "deps/my-ops"]\n\tpath = deps/my-ops\n\turl = https://example.com/x.git\n'
    )


def _paths(text: str) -> list[str]:
    block = text.split("  push:\n", 1)[1].split("  pull_request:", 1)[0]
    return re.findall(r'^      - "([^"]+)"$', block, flags=re.MULTILINE)


def _write(*argv: str) -> str:
    assert main(["ci", "deps/my-ops", *argv]) == 0
    return OUT.read_text()


def test_submodule_project_triggers_on_its_gitlink_not_a_glob(repo: Path) -> None:
    _as_submodule(repo)
    text = _write()
    assert _paths(text) == ["deps/my-ops", str(OUT)]
    assert "deps/my-ops/**" not in text.split("on:", 1)[1]
    assert "submodules: true" in text


def test_plain_folder_project_triggers_on_its_files(repo: Path) -> None:
    assert _paths(_write()) == ["deps/my-ops/my_ops/**", "deps/my-ops/pyproject.toml", str(OUT)]


def test_builds_both_machines_in_the_cuda_devel_container_with_kernels_required(
    repo: Path,
) -> None:
    text = _write()
    assert "machine: x86_64" in text and "machine: aarch64" in text
    assert "container: nvidia/cuda:13.0.0-devel-ubuntu24.04" in text
    assert 'MY_OPS_KERNELS_REQUIRE: "1"' in text
    assert '/opt/kernels/bin/kernelpack build "$KERNEL_PROJECT" --wheel-dir dist' in text
    assert _job_env(text, "build")["KERNEL_PROJECT"] == "deps/my-ops"
    assert "actions/upload-artifact@v4" in text


def test_summary_prints_the_pins_of_the_built_wheels(repo: Path) -> None:
    text = _write()
    assert (
        'uvx "kernelpack==$KERNELPACK_VERSION" pin dist/*.whl --url-base "$RELEASES/$TAG"' in text
    )
    assert _step_env(text, "publish", "Pins for [tool.uv.sources]")["KERNELPACK_VERSION"] == (
        __version__
    )
    assert '>> "$GITHUB_STEP_SUMMARY"' in text


def test_torch_and_cuda_come_from_the_lock_when_there_is_one(repo: Path) -> None:
    (repo / "uv.lock").write_text(
        'version = 1\n[[package]]\nname = "torch"\nversion = "2.11.0+cu128"\n'
    )
    text = _write()
    assert _matrix(text) == [("x86_64", "3.12", "2.11.0"), ("aarch64", "3.12", "2.11.0")]
    assert "container: nvidia/cuda:12.8.0-devel-ubuntu24.04" in text
    assert "https://download.pytorch.org/whl/cu128" in text
    assert "uv.lock" in _paths(text)


def test_without_a_lock_torch_is_the_newest_for_the_cuda_given(repo: Path) -> None:
    text = _write("--cuda", "12.9")
    assert _matrix(text) == [("x86_64", "3.12", ""), ("aarch64", "3.12", "")]
    assert '"torch${TORCH:+==$TORCH}"' in text and "uv.lock" not in text.split("jobs:", 1)[1]
    assert "https://download.pytorch.org/whl/cu129" in text


def test_check_passes_when_up_to_date_and_fails_when_stale(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ci", "deps/my-ops", "--check"]) == 1
    assert "does not exist" in capsys.readouterr().err
    _write()
    assert main(["ci", "deps/my-ops", "--check"]) == 0
    _as_submodule(repo)
    assert main(["ci", "deps/my-ops", "--check"]) == 1
    assert "is out of date; write it with `kernelpack ci`" in capsys.readouterr().err


def test_refuses_to_overwrite_a_workflow_it_did_not_write(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    OUT.parent.mkdir(parents=True)
    OUT.write_text("name: mine\n")
    assert main(["ci", "deps/my-ops"]) == 2
    assert "not written by kernelpack ci; pass --force" in capsys.readouterr().err
    assert OUT.read_text() == "name: mine\n"
    assert main(["ci", "deps/my-ops", "--force"]) == 0


def test_rewrites_its_own_workflow(repo: Path) -> None:
    _write()
    _as_submodule(repo)
    assert _paths(_write())[0] == "deps/my-ops"


@pytest.mark.parametrize("argv", [["--cuda", "thirteen"], ["--python", "3"]])
def test_bad_versions_exit_2(
    repo: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert main(["ci", "deps/my-ops", *argv]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_workflow_is_valid_yaml_with_build_publish_and_release_channel_jobs(repo: Path) -> None:
    yaml = pytest.importorskip("yaml")
    _as_submodule(repo)
    data = yaml.safe_load(_write())
    assert set(data["jobs"]) == {"build", "publish", "channels", "pypi", "pages"}
    assert data["jobs"]["publish"]["needs"] == "build"
    assert data[True]["push"]["paths"][0] == "deps/my-ops"  # YAML 1.1 reads `on` as True


def _matrix(text: str, job: str = "build") -> list[tuple[str, str, str]]:
    block = text.split(f"\n  {job}:\n", 1)[1].split("\n    runs-on:", 1)[0]
    return re.findall(
        r'- machine: (\S+)\n\s+runner: \S+\n\s+python: "([\d.]+)"\n\s+torch: "([\d.]*)"', block
    )


def test_stable_package_builds_one_abi3_wheel_per_machine_with_the_first_python(
    repo: Path,
) -> None:
    text = _write("--python", "3.11,3.12", "--torch", "2.10.0,2.11.0")
    assert _matrix(text) == [("x86_64", "3.11", "2.10.0"), ("aarch64", "3.11", "2.10.0")]


def test_classic_package_builds_one_wheel_per_machine_and_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["new", "deps/my-ops", "--kernel", "scale", "--abi", "torch"]) == 0
    text = _write("--python", "3.11,3.12", "--torch", "2.10.0,2.11.0")
    assert _matrix(text) == [
        (machine, python, torch)
        for machine in ("x86_64", "aarch64")
        for python in ("3.11", "3.12")
        for torch in ("2.10.0", "2.11.0")
    ]
    assert (
        "name: wheels-${{ matrix.machine }}-py${{ matrix.python }}-torch${{ matrix.torch }}" in text
    )
    assert "UV_PYTHON: ${{ matrix.python }}" in text


def test_compiles_through_sccache_on_the_github_actions_cache_by_default(repo: Path) -> None:
    text = _write()
    assert "uses: mozilla-actions/sccache-action@v0.0.9" in text
    assert 'version: "v0.16.0"' in text
    assert 'SCCACHE_GHA_ENABLED: "true"' in text
    assert 'KERNELPACK_LAUNCHER: "sccache"' in text


def test_s3_cache_names_the_bucket_and_is_read_only_for_pull_requests(repo: Path) -> None:
    text = _write("--cache", "s3", "--s3-bucket", "team-cache", "--s3-region", "eu-west-1")
    assert 'SCCACHE_BUCKET: "team-cache"' in text
    assert 'SCCACHE_REGION: "eu-west-1"' in text
    assert "AWS_ACCESS_KEY_ID: ${{ secrets.AWS_ACCESS_KEY_ID }}" in text
    assert "github.event_name == 'pull_request' && 'READ_ONLY'" in text
    assert "SCCACHE_GHA_ENABLED" not in text


def test_no_cache_leaves_sccache_out(repo: Path) -> None:
    text = _write("--cache", "none")
    assert "sccache" not in text.split("jobs:", 1)[1]


def test_farm_takes_scheduler_and_token_from_secrets_next_to_the_cache(repo: Path) -> None:
    text = _write("--farm")
    build = text.split("jobs:", 1)[1]
    assert "KERNELPACK_DIST_SCHEDULER: ${{ secrets.KERNELPACK_DIST_SCHEDULER }}" in build
    assert "KERNELPACK_DIST_TOKEN: ${{ secrets.KERNELPACK_DIST_TOKEN }}" in build
    assert 'SCCACHE_GHA_ENABLED: "true"' in build
    assert "KERNELPACK_DIST" not in _write()


def test_farm_without_sccache_exits_2(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ci", "deps/my-ops", "--cache", "none", "--farm"]) == 2
    assert "--farm sends the compiles through sccache" in capsys.readouterr().err


def test_s3_cache_without_a_bucket_exits_2(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ci", "deps/my-ops", "--cache", "s3"]) == 2
    assert "--s3-bucket" in capsys.readouterr().err


def test_smoke_job_installs_each_wheel_with_its_torch_on_the_gpu_runner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["new", "deps/my-ops", "--kernel", "scale", "--abi", "torch"]) == 0
    text = _write("--torch", "2.10.0,2.11.0", "--gpu-runner", "linux-h100")
    assert _matrix(text, "smoke") == [("x86_64", "3.12", "2.10.0"), ("x86_64", "3.12", "2.11.0")]
    smoke = text.split("\n  smoke:\n", 1)[1].split("\n  publish:\n", 1)[0]
    assert "runner: linux-h100" in smoke
    assert 'MY_OPS_KERNELS_REQUIRE: "1"' in smoke
    assert '"torch${TORCH:+==$TORCH}"' in smoke
    assert 'dist/*.whl "kernelpack==$KERNELPACK_VERSION"' in smoke
    assert _job_env(text, "smoke")["KERNELPACK_VERSION"] == __version__
    assert 'kernelpack" status "$KERNEL_PACKAGE" --require' in smoke
    assert _job_env(text, "smoke")["KERNEL_PACKAGE"] == "my_ops"
    refusals = smoke.index(
        '-m kernelpack_runtime.testing.refusals \\\n            "$KERNEL_PACKAGE"'
    )
    assert smoke.index('status "$KERNEL_PACKAGE" --require') < refusals
    assert "needs: [build, smoke]" in text


def test_without_a_gpu_runner_there_is_no_smoke_job(repo: Path) -> None:
    text = _write()
    assert "\n  smoke:\n" not in text
    assert "needs: build" in text


def test_kernelpack_version_comes_from_the_lock(repo: Path) -> None:
    (repo / "uv.lock").write_text(
        'version = 1\n[[package]]\nname = "kernelpack"\nversion = "0.0.9"\n'
    )
    text = _write()
    assert _job_env(text, "build")["KERNELPACK_VERSION"] == "0.0.9"
    assert _step_env(text, "publish", "Pins for [tool.uv.sources]")["KERNELPACK_VERSION"] == "0.0.9"
    assert __version__ not in text


def _smoke(text: str) -> str:
    return text.split("\n  smoke:\n", 1)[1].split("\n  publish:\n", 1)[0]


@pytest.mark.parametrize(
    ("label", "count"),
    [
        ("linux-h100-4x", 4),
        ("gpu-x8", 8),
        ("linux_2gpus", 2),
        ("ci.1gpu", 1),
        ("linux-h100", None),
        ("linux.g5.4xlarge.nvidia.gpu", None),
    ],
)
def test_gpu_count_is_read_from_a_label_part(label: str, count: int | None) -> None:
    assert gpu_count_of(label) == count


def test_a_label_stating_two_gpu_counts_is_refused() -> None:
    with pytest.raises(UsageError, match="states 2, 4 GPUs; pass --gpu-count N"):
        gpu_count_of("a-2x-4x")


def test_smoke_job_runs_the_gpu_tests_one_worker_per_gpu_the_label_states(repo: Path) -> None:
    smoke = _smoke(_write("--gpu-runner", "linux-h100-4x", "--gpu-tests", "deps/my-ops/tests"))
    assert "- uses: actions/checkout@v4" in smoke.split("download-artifact", 1)[0]
    assert 'uv pip install --python "$RUNNER_TEMP/smoke" "pytest" "pytest-xdist"' in smoke
    assert (
        '"$RUNNER_TEMP/smoke/bin/pytest" deps/my-ops/tests -p no:cacheprovider --kernels-require'
        ' -n 4 --kernels-gpus auto\n          -m "not gpus"'
    ) in smoke
    # The gpus(n) tests, after, in one process holding every GPU; required on this runner.
    assert "-p no:cacheprovider --kernels-require -m gpus" in smoke


def test_gpu_count_option_wins_over_the_label(repo: Path) -> None:
    text = _write(
        "--gpu-runner", "linux-h100-4x", "--gpu-count", "8", "--gpu-tests", "deps/my-ops/tests"
    )
    assert "-n 8 --kernels-gpus auto" in _smoke(text)


def test_one_gpu_runner_runs_the_gpu_tests_in_one_process(repo: Path) -> None:
    smoke = _smoke(_write("--gpu-runner", "linux-h100", "--gpu-tests", "deps/my-ops/tests"))
    assert "--kernels-gpus" not in smoke
    assert '--kernels-require\n          -m "not gpus"' in smoke
    # A one-GPU runner cannot hold a gpus(2) test: those skip, with their reason.
    assert "-p no:cacheprovider -m gpus" in smoke


def test_without_gpu_tests_the_smoke_job_runs_no_pytest(repo: Path) -> None:
    smoke = _smoke(_write("--gpu-runner", "linux-h100-4x"))
    assert "pytest" not in smoke
    assert "actions/checkout" not in smoke


def test_test_runners_come_from_the_lock(repo: Path) -> None:
    (repo / "uv.lock").write_text(
        'version = 1\n[[package]]\nname = "pytest"\nversion = "8.3.5"\n'
        '[[package]]\nname = "pytest-xdist"\nversion = "3.6.1"\n'
    )
    smoke = _smoke(_write("--gpu-runner", "linux-h100", "--gpu-tests", "deps/my-ops/tests"))
    assert '"pytest==8.3.5" "pytest-xdist==3.6.1"' in smoke


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpu-tests", "deps/my-ops/tests"], "--gpu-tests needs --gpu-runner LABEL"),
        (["--gpu-count", "2"], "--gpu-count needs --gpu-runner LABEL"),
        (["--gpu-runner", "g", "--gpu-count", "0"], "--gpu-count 0: expected a number of GPUs"),
        (["--gpu-runner", "g", "--gpu-tests", "nope"], "--gpu-tests nope: no such file or folder"),
        (["--gpu-runner", "g", "--gpu-tests", "t p"], "--gpu-tests t p: holds a space"),
    ],
)
def test_bad_gpu_test_options_exit_2(
    repo: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    (repo / "t p").mkdir()
    assert main(["ci", "deps/my-ops", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1


def _job_env(text: str, job: str) -> dict[str, str]:
    env: dict[str, str] = yaml.safe_load(text)["jobs"][job]["env"]
    return env


def _step_env(text: str, job: str, step: str) -> dict[str, str]:
    steps = yaml.safe_load(text)["jobs"][job]["steps"]
    env: dict[str, str] = next(s for s in steps if s.get("name") == step)["env"]
    return env


def test_hub_exports_in_each_build_and_a_release_signs_and_uploads_it(repo: Path) -> None:
    yaml = pytest.importorskip("yaml")
    text = _write("--hub", "org/my-ops")
    jobs = yaml.safe_load(text)["jobs"]
    build_steps = [step.get("run", "") for step in jobs["build"]["steps"]]
    assert '/opt/kernels/bin/kernelpack export --hub hub "$KERNEL_PROJECT"' in build_steps
    hub = jobs["hub"]
    assert hub["needs"] == "build" and hub["if"] == "${{ inputs.release_tag }}"
    # sigstore signs with the workflow's own GitHub OIDC identity: no key, only id-token
    assert hub["permissions"] == {"contents": "read", "id-token": "write"}
    runs = "\n".join(step.get("run", "") for step in hub["steps"])
    assert 'sign --bundle "$metadata.sigstore" "$metadata"' in runs
    assert 'upload "$HUB_REPO" hub/build build --repo-type kernel --revision "$HUB_BRANCH"' in runs
    env = hub["steps"][-1]["env"]
    assert env["HUB_REPO"] == "org/my-ops" and env["HUB_BRANCH"] == "v0"
    assert env["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"


def test_without_hub_there_is_no_hub_job(repo: Path) -> None:
    text = _write()
    assert "\n  hub:\n" not in text and "kernelpack export" not in text


@pytest.mark.parametrize("repo_id", ["my-ops", "org/", "org/my ops", "a/b/c"])
def test_a_bad_hub_repository_exits_2(
    repo: Path, repo_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ci", "deps/my-ops", "--hub", repo_id]) == 2
    assert "--hub" in capsys.readouterr().err
