"""Pin glibc malloc's thresholds, so that the page faults of an eager CPU forward pass depend on
what it allocates and not on what the process ran before.

By default glibc raises its mmap threshold to the largest block freed so far (up to 32 MiB on
64-bit) and trims the top of its heap once more than twice that is free (mallopt(3), "dynamic
mmap threshold"). A forward pass whose working set grows and shrinks then maps and faults part of
it again on every call, by an amount that depends on the process's allocation history: identical
processes wrote 159-335 MB of fresh pages per mobilenet_v2 batch-8 call on the Zen 4 VM, which
took it from 75 ms to 170 ms (docs/findings/2026-11-24-glibc-allocator-refaults.md). No workload model can predict that history.

Setting both thresholds explicitly turns the dynamic rule off. With the mmap threshold at 1 GiB
and no heap trim, blocks below 1 GiB come from a heap that keeps its high-water mark, so after
its first call a forward pass touches no fresh pages, as under a caching allocator (jemalloc,
tcmalloc). Blocks of 1 GiB or more are still mapped fresh by every call: the part
model.estimate.cpu_passes.first_touch_s charges (FamilyParams.fresh_allocation_bytes). A deployment
gets the same behaviour with `TUNABLES` in its environment.

Never trimming keeps a heap at the largest size the process ever needed: a calibration held
2.7 GB after its GEMM sweep and bandwidth probe. `release_freed_memory` (malloc_trim) gives the
free heap back between phases, outside any timed region: the next phase's warm-up calls fault
its pages again, and its timed calls then touch none, as before.
"""

from __future__ import annotations

import ctypes
import platform
from dataclasses import dataclass

from chipcal.measure.device import CPU, Device

M_TRIM_THRESHOLD = -1            # <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 2**30
TRIM_THRESHOLD_BYTES = 2**31 - 1                   # mallopt takes an int: never trim in practice
TUNABLES = (f"GLIBC_TUNABLES=glibc.malloc.mmap_threshold={MMAP_THRESHOLD_BYTES}"
            f":glibc.malloc.trim_threshold={TRIM_THRESHOLD_BYTES}")


@dataclass(frozen=True)
class AllocatorSetting:
    mmap_threshold_bytes: int | None   # blocks this large or larger are mapped fresh; None: dynamic
    detail: str                        # what was set, or why nothing was


def pin_allocator() -> AllocatorSetting:
    """Set glibc's mmap and trim thresholds for this process (module docstring); elsewhere
    (musl, macOS, Windows), or where glibc refuses the values, leave the allocator alone and say so."""
    libc_name, version = platform.libc_ver()
    if libc_name != "glibc":
        return AllocatorSetting(None, f"{libc_name or 'not glibc'}: allocator left at its defaults")
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if not (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)):
        return AllocatorSetting(None, f"glibc {version}: mallopt refused the thresholds; dynamic mmap threshold")
    return AllocatorSetting(MMAP_THRESHOLD_BYTES,
                            f"glibc {version} malloc pinned (mallopt): mmap threshold "
                            f"{MMAP_THRESHOLD_BYTES // 2**20} MiB, no heap trim; {TUNABLES} does the same")


def release_freed_memory(device: Device = CPU) -> bool:
    """Give what a finished probe or phase freed back: torch's cached blocks on a CUDA `device`
    (empty_cache), and the free parts of glibc's heaps (malloc_trim(0)). Call it between timed
    regions only: the pages it returns are faulted again by the next call that needs them (module
    docstring). True when glibc returned memory to the kernel."""
    if device.is_cuda:
        import torch

        torch.cuda.empty_cache()
    if platform.libc_ver()[0] != "glibc":
        return False
    malloc_trim = ctypes.CDLL(None).malloc_trim
    malloc_trim.argtypes, malloc_trim.restype = (ctypes.c_size_t,), ctypes.c_int
    return bool(malloc_trim(0))
