"""Build-speed benchmark package (benchmarks/build_speed.py builds it two ways)."""
