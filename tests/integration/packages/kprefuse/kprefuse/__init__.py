"""kernelpack's stable-ABI refusal package: a kernel that refuses bad input with a message."""
