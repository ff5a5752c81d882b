"""Writers of a user's project files: `new` (a fresh kernel package) and `migration`
(a kernel-builder project moved to `kernels.toml`)."""
