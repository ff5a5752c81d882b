"""A stand-in `torch` package: put the returned folder first on PYTHONPATH and the
toolchain's torch probe sees it instead of the real torch (and runs in milliseconds)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["install_torch"]


def install_torch(
    root: Path,
    version: str = "2.14.1+cu130",
    cuda: str | None = "13.0",
    *,
    cxx11_abi: bool = True,
    import_error: str | None = None,
    missing: bool = False,
) -> Path:
    """Write `root/site/torch/__init__.py` and return `root/site`.

    `import_error` makes `import torch` raise `ImportError(import_error)` (a broken install);
    `missing` makes it raise the `ModuleNotFoundError` of an absent torch.
    """
    site = root / "site"
    package = site / "torch"
    package.mkdir(parents=True, exist_ok=True)
    if missing:
        body = 'raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n'
    elif import_error is not None:
        body = f"raise ImportError({import_error!r})\n"
    else:
        body = (
            f"__version__ = {version!r}\n"
            f"class version:\n    cuda = {cuda!r}\n"
            f"class _C:\n    _GLIBCXX_USE_CXX11_ABI = {cxx11_abi!r}\n"
        )
    (package / "__init__.py").write_text(body)
    return site
