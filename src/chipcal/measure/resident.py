"""Peak resident memory of this process, for the calibration report: what a machine needs free
to run it (a Jetson Orin Nano has 8 GB in all).

getrusage(2) keeps the high-water mark of the resident set (ru_maxrss: KiB on Linux, bytes on
macOS). The figure counts file-backed pages too (torch's and torchvision's libraries, about
0.33 GB), which the kernel can drop under pressure; it is what `/usr/bin/time -v` reports.
Children are not added: a calibration starts none, and RUSAGE_CHILDREN would count the helper
that `import torch` forks, which carries the parent's resident set (0.46 GB here) into its exec.
"""

from __future__ import annotations

import sys


def peak_rss_bytes() -> int | None:
    """This process's peak resident set so far; None where getrusage is missing (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    unit = 1 if sys.platform == "darwin" else 1024
    return unit * resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
