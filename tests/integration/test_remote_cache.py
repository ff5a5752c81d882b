"""sccache with a real remote backend: a Redis server and an S3 server on loopback.

Machine A (a clone with its own empty local cache) builds `examples/llm_ops` and the classic
kernel of `kpdemo` once, cold, writing every object to both backends (sccache's multi-level
chain `redis,s3`). Machine B (a fresh clone with another empty local cache and one backend)
builds them again. At the path A used (two CI runners), B gets every compile from Redis and
from S3. In another folder (a developer's machine), the command lines are the same
(`kernelpack.builder.graph`) and the .cpp compiles and the host steps and ptxas of each .cu
compile hit, but nvcc hands cudafe++ and cicc the canonical absolute source path as an
argument, which sccache hashes: those steps run again. Both servers are real processes
started here and stopped after the module.
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from buildlog import compiles
from builds import copy_package

from kernelpack.builder import engine, install
from kernelpack.builder.outputs import BuildResult
from kernelpack.project.locate import locate
from kernelpack.toolchain.launcher.cache import CacheStats
from kernelpack_runtime.record import BuildRecord

pytestmark = pytest.mark.integration

#: The example and the test package each machine builds.
PACKAGES = ("llm_ops", "kpdemo")
BUCKET = "kernelpack-cache"
# The S3 server takes any credentials; sccache needs some to sign its requests.
FAKE_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=sysconfig.get_path("scripts"))
    if found is None:
        pytest.skip(f"{name} is not installed (scripts/bootstrap installs it)")
    return found


@pytest.fixture(scope="module")
def sccache() -> str:
    return _tool("sccache")


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    server = _tool("redis-server")
    port = _free_port()
    folder = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, proc, "redis-server")
        yield port
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def s3_port() -> Iterator[int]:
    server = _tool("moto_server")
    port = _free_port()
    proc = subprocess.Popen(
        [server, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, proc, "moto_server")
        import boto3

        _s3(port).create_bucket(Bucket=BUCKET)
        del boto3
        yield port
    finally:
        _stop(proc)


def _s3(port: int):  # type: ignore[no-untyped-def]
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id=FAKE_AWS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_AWS["AWS_SECRET_ACCESS_KEY"],
    )


def _redis_keys(port: int) -> int:
    out = subprocess.run(
        [_tool("redis-cli"), "-p", str(port), "dbsize"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    )
    return int(out.stdout.strip())


def _s3_objects(port: int) -> set[str]:
    listing = _s3(port).list_objects_v2(Bucket=BUCKET)
    return {item["Key"] for item in listing.get("Contents", [])}


def _redis_env(port: int) -> dict[str, str]:
    return {"SCCACHE_REDIS_ENDPOINT": f"redis://127.0.0.1:{port}"}


def _s3_env(port: int) -> dict[str, str]:
    return {
        "SCCACHE_BUCKET": BUCKET,
        "SCCACHE_ENDPOINT": f"http://127.0.0.1:{port}",
        "SCCACHE_S3_USE_SSL": "false",
        "SCCACHE_REGION": "us-east-1",
        **FAKE_AWS,
    }


def _env(sccache: str, local_cache: Path, **backend: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SCCACHE_", "CCACHE_", "KERNELPACK_", "LLM_OPS_", "KPDEMO_"))
    }
    env.update(
        KERNELPACK_LAUNCHER=sccache,
        SCCACHE_DIR=str(local_cache),
        # The smallest classic package: kpdemo's classic (ATen) kernel alone.
        KPDEMO_KERNELS="addone",
        XDG_CACHE_HOME=os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")),
    )
    env.update(backend)
    return env


def _clone(folder: Path) -> dict[str, Path]:
    return {name: copy_package(name, folder / name) for name in PACKAGES}


@dataclass(frozen=True)
class Machine:
    checkout: Path
    results: dict[str, BuildResult]
    libraries: dict[str, bytes]
    """`package/kernel` -> the bytes of the library the build produced."""

    def stats(self, name: str) -> CacheStats:
        stats = self.results[name].cache
        assert stats is not None, f"{name}: the build recorded no cache statistics"
        return stats


def _machine(checkout: Path, env: dict[str, str]) -> Machine:
    """Clone the packages into `checkout`, build them, keep the results, remove the clone."""
    results = {}
    libraries = {}
    for name, root in _clone(checkout).items():
        results[name] = engine.build_project(locate(root), environ=env)
        for kernel, path in results[name].libraries.items():
            libraries[f"{name}/{kernel}"] = path.read_bytes()
    shutil.rmtree(checkout)
    return Machine(checkout, results, libraries)


@pytest.fixture(scope="module")
@compiles("llm_ops and kpdemo through sccache (cold, redis+s3)")
def machine_a(
    tmp_path_factory: pytest.TempPathFactory, sccache: str, redis_port: int, s3_port: int
) -> Machine:
    """Clone 1, cold: every object goes to Redis and to S3 in the same build."""
    base = tmp_path_factory.mktemp("machine-a")
    env = _env(
        sccache,
        base / "local-cache",
        SCCACHE_MULTILEVEL_CHAIN="redis,s3",
        **_redis_env(redis_port),
        **_s3_env(s3_port),
    )
    return _machine(base / "checkout", env)


def _machine_b(
    tmp_path_factory: pytest.TempPathFactory,
    a: Machine,
    sccache: str,
    backend: dict[str, str],
    *,
    elsewhere: bool = False,
) -> Machine:
    """A fresh clone at A's path, or (`elsewhere`) in another folder, with an empty local
    cache reading `backend`."""
    base = tmp_path_factory.mktemp("machine-b")
    checkout = base / "somewhere" / "else" / "checkout" if elsewhere else a.checkout
    return _machine(checkout, _env(sccache, base / "local-cache", **backend))


def test_cold_build_misses_and_writes_every_object_to_both_backends(
    machine_a: Machine, redis_port: int, s3_port: int
) -> None:
    for name in PACKAGES:
        stats = machine_a.stats(name)
        assert (stats.hits, stats.errors) == (0, 0)
        assert stats.misses > 0
        assert stats.backend == "redis+s3"
    assert _redis_keys(redis_port) > 0
    assert len(_s3_objects(s3_port)) > 1  # more than sccache's own startup check object


def test_fresh_clone_with_an_empty_local_cache_hits_redis_for_every_compile(
    machine_a: Machine, tmp_path_factory: pytest.TempPathFactory, sccache: str, redis_port: int
) -> None:
    b = _machine_b(tmp_path_factory, machine_a, sccache, _redis_env(redis_port))
    for name in PACKAGES:
        stats = b.stats(name)
        assert stats.backend == "redis"
        assert (stats.misses, stats.errors) == (0, 0), stats
        assert stats.remote_hits == stats.hits > 0
    assert b.libraries == machine_a.libraries


def test_fresh_clone_elsewhere_hits_redis_for_the_host_steps_not_cudafe_and_cicc(
    machine_a: Machine, tmp_path_factory: pytest.TempPathFactory, sccache: str, redis_port: int
) -> None:
    """A clone in another folder: the .cpp compiles and the host steps and ptxas of each .cu
    compile hit; nvcc hands cudafe++ and cicc the source's canonical absolute path as an
    argument, which sccache hashes, so those run again and each .cu compile counts as a miss."""
    b = _machine_b(tmp_path_factory, machine_a, sccache, _redis_env(redis_port), elsewhere=True)
    for name in PACKAGES:
        stats = b.stats(name)
        steps = b.results[name].compiled
        nvcc = sum(1 for step in steps if step.tool == "nvcc")
        assert (stats.misses, stats.hits, stats.errors) == (nvcc, len(steps) - nvcc, 0), stats
        assert stats.backend == "redis" and stats.remote_hits == stats.hits > 0
    assert b.libraries == machine_a.libraries


def test_fresh_clone_with_an_empty_local_cache_hits_s3_for_every_compile(
    machine_a: Machine, tmp_path_factory: pytest.TempPathFactory, sccache: str, s3_port: int
) -> None:
    b = _machine_b(tmp_path_factory, machine_a, sccache, _s3_env(s3_port))
    for name in PACKAGES:
        stats = b.stats(name)
        assert stats.backend == "s3"
        assert (stats.misses, stats.errors) == (0, 0), stats
        assert stats.remote_hits == stats.hits > 0
    assert b.libraries == machine_a.libraries


@pytest.mark.parametrize("backend", ["redis", "s3"])
def test_read_only_clone_reads_the_backend_and_writes_nothing(
    machine_a: Machine,
    tmp_path_factory: pytest.TempPathFactory,
    sccache: str,
    redis_port: int,
    s3_port: int,
    backend: str,
) -> None:
    if backend == "redis":
        env = {**_redis_env(redis_port), "SCCACHE_REDIS_RW_MODE": "READ_ONLY"}
        stored = lambda: _redis_keys(redis_port)  # noqa: E731
    else:
        env = {**_s3_env(s3_port), "SCCACHE_S3_RW_MODE": "READ_ONLY"}
        stored = lambda: len(_s3_objects(s3_port))  # noqa: E731
    before = stored()
    # An edited kernel: its compile misses, and a read-only cache must not store the result.
    local_cache = tmp_path_factory.mktemp("read-only") / "local-cache"
    checkout = machine_a.checkout
    roots = _clone(checkout)
    source = roots["kpdemo"] / "kpdemo" / "addone" / "csrc" / "addone.cu"
    source.write_text(
        source.read_text() + "\nnamespace { [[maybe_unused]] int edited_here = 1; }\n"
    )
    try:
        result = engine.build_project(
            locate(roots["kpdemo"]), environ=_env(sccache, local_cache, **env)
        )
    finally:
        shutil.rmtree(checkout)
    stats = result.cache
    assert stats is not None and stats.read_only
    assert stats.hits > 0 and stats.misses > 0  # the binding hit, the edited .cu missed
    assert stats.writes == 0
    assert stored() == before


def test_unreachable_backend_builds_locally_with_one_warning_and_exit_0(
    tmp_path: Path,
    sccache: str,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    root = _clone(tmp_path / "checkout")["kpdemo"]
    env = _env(
        sccache, tmp_path / "local-cache", SCCACHE_REDIS_ENDPOINT=f"redis://127.0.0.1:{closed}"
    )
    env["KPDEMO_KERNELS"] = "scale"
    for key in [k for k in os.environ if k.startswith(("SCCACHE_", "KPDEMO_", "KERNELPACK_"))]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    from kernelpack.cli import main

    started = time.monotonic()
    assert main(["build", str(root), "--inplace"]) == 0
    assert time.monotonic() - started < 120
    err = capfd.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("kernelpack: warning:")]
    assert len(warnings) == 1 and f"127.0.0.1:{closed} is unreachable" in warnings[0]
    assert "cache: sccache (local)" in err
    assert (root / "kpdemo" / "scale" / "_C.abi3.so").is_file()


def test_noop_build_keeps_the_statistics_of_the_build_that_compiled_and_records_them(
    tmp_path: Path, sccache: str
) -> None:
    root = _clone(tmp_path / "checkout")["kpdemo"]
    env = {**_env(sccache, tmp_path / "local-cache"), "KPDEMO_KERNELS": "scale"}
    out = io.StringIO()
    first = engine.build_project(locate(root), environ=env, stream=out)
    install.install_inplace(first)
    assert first.cache is not None and first.cache.misses > 0
    assert out.getvalue().count("cache: sccache (local)") == 1
    again = io.StringIO()
    second = engine.build_project(locate(root), environ=env, stream=again)
    install.install_inplace(second)
    assert second.compiled == ()
    assert second.cache == first.cache
    on_disk = BuildRecord.read(root / "kpdemo" / "_kernelpack.json")
    assert on_disk.cache == first.cache.record()
    assert "cache:" not in again.getvalue()
