"""The thread-scaling check of a CPU calibration (measure.threads), journaled and as the document keeps it."""

from __future__ import annotations

from chipcal.calibrate.host_records import ThreadsSection


def thread_section(journal) -> ThreadsSection | None:
    """measure.threads' probe for this run; a resumed run reads it from its journal. None when
    torch runs a single thread."""
    from chipcal.measure.threads import probe_thread_scaling

    if (recorded := journal.get("threads")) is None:
        probe = probe_thread_scaling()
        recorded = probe and {"threads": probe.threads, "speedup": probe.speedup, "method": probe.method,
                              "one_thread_s": probe.one_thread.median_s, "all_threads_s": probe.all_threads.median_s}
        journal.put("threads", recorded)
    return ThreadsSection(**recorded) if recorded else None
