"""The project layer: what the user wrote, read and checked.

`locate` finds a project (`pyproject.toml`, `kernels.toml` or a kernel-builder `build.toml`),
`settings` reads `[tool.kernelpack]`, `manifest` reads `kernels.toml` and `buildtoml` reads
`build.toml` into the same `KernelSpec` values; `_toml` and `_shell` are their shared readers
and refusals, `filekinds` says which files are sources, headers and outputs, and `_schema`
generates the JSON Schema and docs table from the declared keys. No compiler is needed here.
"""
