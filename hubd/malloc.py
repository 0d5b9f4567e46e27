"""glibc's malloc asked to give large blocks back to the kernel when they are freed (imports nothing from hubd).

A message of megabytes passes through several buffers of its size (paho's packet buffer and the copies its
decoding makes, the payload). glibc serves blocks from 128 KiB up with mmap, but raises that threshold to the
size of each such block freed, up to 32 MiB: after the first large message every later one comes from the heap,
which fragments and does not shrink, so RSS ratchets up with each (measured: a 192 MiB cgroup's worst case went
from 180 to 155 MiB, BENCHMARKS.md). A fixed threshold keeps blocks of 1 MiB and more in mmap, returned at free.
Elsewhere than glibc (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util

_M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD_BYTES = 1024 * 1024


def return_large_blocks(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Set glibc's mmap threshold (which also ends its dynamic raising); whether it took."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # no such library, or no mallopt in it (not glibc)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))
