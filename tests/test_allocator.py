"""The pinned allocator: a forward pass's fresh pages stop depending on what the process freed
before (measure.allocator), and first touch is charged above the threshold the run had."""

from __future__ import annotations

import dataclasses
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from chipcal.calibrate.document import FirstTouchSection
from chipcal.model.estimate.cpu_passes import first_touch_s
from chipcal.model.mapping.params import default_params

# One child process per setting: free a 20 MiB block (glibc's dynamic rule raises the mmap
# threshold to 20 MiB and the trim threshold to 40 MiB), then allocate, touch and free three
# 16 MiB blocks per call. 48 MiB free at the top of the heap exceeds 40 MiB, so by glibc's
# documented rule (mallopt(3)) the default allocator gives it back and faults it again on every
# call; pinned, the heap is kept and a call touches no fresh page; pinned and trimmed (as between
# a calibration's phases), one warm-up call faults the heap again and the calls after it none.
# Fresh bytes are counted as minor faults x the page size, so the child turns transparent huge
# pages off for itself (prctl PR_SET_THP_DISABLE): one fault of a 2 MiB huge page would count as
# one small page. It prints the fresh MiB per call and whether THP is off.
CHILD = """
import ctypes, resource, sys
from chipcal.measure.allocator import pin_allocator, release_freed_memory
libc = ctypes.CDLL(None)
thp_off = libc.prctl(41, 1, 0, 0, 0) == 0
if sys.argv[1] in ("pinned", "trimmed"):
    assert pin_allocator().mmap_threshold_bytes
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, (ctypes.c_size_t,), (ctypes.c_void_p,)
MiB = 2**20
def call():
    blocks = [libc.malloc(16 * MiB) for _ in range(3)]
    for b in blocks:
        ctypes.memset(b, 1, 16 * MiB)
    for b in blocks:
        libc.free(b)
libc.free(libc.malloc(20 * MiB))
call(); call()
if sys.argv[1] == "trimmed":         # a phase ends: the kept heap is given back, a warm-up call faults it again
    assert release_freed_memory()
    warm = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    call()
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - warm) * resource.getpagesize() >= 40 * MiB
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    call()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) * resource.getpagesize() / 4 / MiB, thp_off)
"""
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _fresh_mib_per_call(setting: str) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, setting], capture_output=True, text=True, check=True)
    mib, thp_off = out.stdout.split()
    if thp_off != "True" and "[always]" in (THP.read_text() if THP.exists() else ""):
        pytest.skip("transparent huge pages are always on and prctl cannot turn them off: faults do not count pages")
    return float(mib)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt thresholds are glibc's")
def test_pinned_heap_is_not_faulted_again_after_a_larger_block_was_freed():
    assert _fresh_mib_per_call("default") >= 40          # 48 MiB trimmed and faulted again per call
    assert _fresh_mib_per_call("pinned") < 1
    # given back between phases (release_freed_memory), faulted again by one warm-up call, then kept
    assert _fresh_mib_per_call("trimmed") < 1


def test_first_touch_is_charged_above_the_threshold_the_run_had():
    section = FirstTouchSection(bytes_per_s=4e9, size_bytes=64 * 2**20, fresh_median_s=0.018,
                                reused_median_s=0.0018, fresh_iqr_s=0.001, n=9)
    # a run with glibc's dynamic threshold: 40 MiB >= 32 MiB is mapped fresh, 41,943,040 B / 4 GB/s
    dynamic = section.charged_in(default_params("cpu"))
    assert first_touch_s(40 * 2**20, dynamic) == pytest.approx(40 * 2**20 / 4e9)
    # pinned at 1 GiB: 40 MiB comes from the kept heap, a 2 GiB output is still mapped fresh
    pinned = dataclasses.replace(section, mmap_threshold_bytes=2**30).charged_in(default_params("cpu"))
    assert first_touch_s(40 * 2**20, pinned) == 0.0
    assert first_touch_s(2 * 2**30, pinned) == pytest.approx(2 * 2**30 / 4e9)
    # no rate measured: nothing charged, whatever the threshold
    unmeasured = dataclasses.replace(section, bytes_per_s=None).charged_in(default_params("cpu"))
    assert first_touch_s(2 * 2**30, unmeasured) == 0.0
