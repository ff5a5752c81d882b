"""`kernelpack ci [PATH] [--out FILE] [--check]`: the GitHub Actions workflow that builds a
package's wheels for x86_64 and aarch64 (through sccache), smoke-tests them on a GPU runner,
uploads them and prints their pins.

Run it from the repository root (where `.github/` lives); PATH is the kernel project, which
may be a git submodule (then the workflow triggers on its gitlink). `--check` exits 1 when the
file on disk differs from what would be written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kernelpack.errors import KernelpackError, UsageError
from kernelpack.plan import all_stable
from kernelpack.project._toml import display_path
from kernelpack.project.locate import PATH_HELP, locate
from kernelpack.release.workflow import (
    CACHES,
    DEFAULT_CUDA,
    DEFAULT_OUT,
    HEADER,
    PUBLISH,
    Workflow,
)
from kernelpack_runtime._files import write_text_atomic

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `ci` verb."""
    parser = subparsers.add_parser(
        "ci",
        help="write the GitHub Actions workflow that builds and pins the wheels",
        description=(
            "Write a GitHub Actions workflow building the package's wheels for x86_64 and "
            "aarch64 in the CUDA devel container through sccache, with every kernel required; "
            "it smoke-tests them on a GPU runner, uploads them and prints the `kernelpack pin` "
            "lines into the job summary."
        ),
    )
    parser.add_argument("path", nargs="?", type=Path, metavar="PATH", help=PATH_HELP)
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"the workflow file (default: {DEFAULT_OUT})"
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when the workflow file is out of date"
    )
    parser.add_argument(
        "--cuda",
        help=f"CUDA of the container (default: the locked torch's, else {DEFAULT_CUDA})",
    )
    parser.add_argument(
        "--python",
        default="3.12",
        help="Python(s) to build with, comma-separated (default: 3.12); a stable-ABI package "
        "builds one abi3 wheel with the first",
    )
    parser.add_argument(
        "--torch",
        help="torch version(s) to build against, comma-separated (default: the one in uv.lock, "
        "else the newest); a classic-ABI package gets one wheel per machine, Python and torch",
    )
    _cache_options(parser)
    _gpu_options(parser)
    _release_options(parser)
    parser.add_argument(
        "--kernelpack-version",
        help="kernelpack version the jobs install (default: uv.lock's, else this one)",
    )
    parser.add_argument(
        "--force", action="store_true", help="overwrite a workflow not written by kernelpack ci"
    )
    parser.set_defaults(func=run)


def _cache_options(parser: argparse.ArgumentParser) -> None:
    """The compiler cache's and the farm's options."""
    parser.add_argument(
        "--cache",
        choices=CACHES,
        default="gha",
        help="sccache's backend: the GitHub Actions cache (default), an S3 bucket, or none",
    )
    parser.add_argument("--s3-bucket", help="the bucket of --cache s3")
    parser.add_argument("--s3-region", default="us-east-1", help="its region (default: us-east-1)")
    parser.add_argument("--s3-endpoint", help="an S3-compatible endpoint URL (default: AWS)")
    parser.add_argument(
        "--farm",
        action="store_true",
        help="also send the compiles to an sccache-dist farm: its scheduler URL and client "
        "token are the secrets KERNELPACK_DIST_SCHEDULER and KERNELPACK_DIST_TOKEN",
    )


def _gpu_options(parser: argparse.ArgumentParser) -> None:
    """The GPU smoke test's options."""
    parser.add_argument(
        "--gpu-runner",
        metavar="LABEL",
        help="runner label of a GPU machine: adds a job that installs each wheel with its torch "
        "and runs `kernelpack status --require` there",
    )
    parser.add_argument(
        "--gpu-machine",
        default="x86_64",
        help="the machine of that runner, whose wheels it tests (default: x86_64)",
    )
    parser.add_argument(
        "--gpu-tests",
        type=Path,
        metavar="PATH",
        help="the package's GPU tests (a folder or file of this repository): the GPU job also "
        "runs them with pytest --kernels-require",
    )
    parser.add_argument(
        "--gpu-count",
        type=int,
        metavar="N",
        help="GPUs of the --gpu-runner (default: the count its label states, as in "
        "linux-h100-4x, 4x, x4, 4gpu; else 1); more than one runs the GPU tests with one "
        "pytest-xdist worker per GPU (-n N --kernels-gpus auto)",
    )


def _release_options(parser: argparse.ArgumentParser) -> None:
    """The release channels' options (`kernelpack index` and where its site goes)."""
    parser.add_argument(
        "--publish",
        default=",".join(PUBLISH),
        metavar="CHANNELS",
        help="where a release (release_tag) goes besides the GitHub release: pypi (trusted "
        "publishing, attestations), pages (the variant site on GitHub Pages), comma-separated, "
        "or none (default: pypi,pages)",
    )
    parser.add_argument(
        "--hub",
        metavar="OWNER/NAME",
        help="also export the Hugging Face Hub layout in each build, and on a release sign "
        "each variant's metadata.json (sigstore, this workflow's GitHub OIDC identity) and "
        "upload it to this Hub kernel repository (secret HF_TOKEN)",
    )
    parser.add_argument(
        "--default",
        metavar="LABEL",
        help="the variant PyPI gets (default: [tool.kernelpack.release] default, else the "
        "only variant built)",
    )


def run(args: argparse.Namespace) -> int:
    """Write (or check) the workflow."""
    repo = Path.cwd()
    project = locate(args.path)
    manifest = project.load_manifest(allow_missing_sources=True)
    # A release builds every kernel (`*_KERNELS_REQUIRE=1`): the rule over the whole manifest.
    stable = all_stable(manifest.kernels)
    workflow = Workflow.of(
        project,
        repo,
        args.out,
        cuda=args.cuda,
        python=args.python,
        torch=args.torch,
        stable=stable,
        cache=args.cache,
        s3_bucket=args.s3_bucket,
        s3_region=args.s3_region,
        s3_endpoint=args.s3_endpoint,
        farm=args.farm,
        gpu_runner=args.gpu_runner,
        gpu_machine=args.gpu_machine,
        gpu_tests=args.gpu_tests,
        gpu_count=args.gpu_count,
        kernelpack=args.kernelpack_version,
        publish=args.publish,
        default_label=args.default,
        hub_repo=args.hub,
    )
    text = workflow.text()
    out: Path = args.out
    shown = display_path(out)
    current = out.read_text(encoding="utf-8") if out.is_file() else None
    if args.check:
        if current == text:
            print(f"{shown} is up to date")
            return 0
        problem = "does not exist" if current is None else "is out of date"
        raise KernelpackError(f"{shown} {problem}; write it with `kernelpack ci`")
    if current is not None and not current.startswith(HEADER) and not args.force:
        raise UsageError(f"{shown}: exists and was not written by kernelpack ci; pass --force")
    write_text_atomic(out, text)
    print(f"wrote {shown} (triggers on: {', '.join(workflow.paths)})")
    return 0
