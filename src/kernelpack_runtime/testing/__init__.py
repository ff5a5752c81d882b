"""Test support for kernel packages: the pytest plugin (`plugin`) and stand-in probes (`fakes`)."""
