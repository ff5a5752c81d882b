"""The copies below are other projects, kept unchanged: their tests import `kernels` and
run only against a built package (see tests/gpu/hub), never during collection here."""

collect_ignore_glob = ["hf-kernels/*", "prime-kernels/*"]
