"""The PyTorch side: single, DDP, FSDP2, FSDP1 and HSDP training on the shared `common` spine."""

import os

# torch's CPU matmuls run on Intel MKL, whose threads MKL may cut down when it finds the machine
# busy (MKL_DYNAMIC, on by default): another split of a sum, other last bits. On an Intel Xeon
# with AVX-512 ([D], docs/hosts.md) a stop and resume ended 1e-7 away from the uninterrupted run
# in 2 of 8 tries of tests/faults/test_loader_resume.py under load, and in 0 of 10 with
# MKL_DYNAMIC=FALSE (the bitwise-resume promise on the CPU needs the same threads every time).
# Set before torch is imported; a user's own value wins.
os.environ.setdefault("MKL_DYNAMIC", "FALSE")
