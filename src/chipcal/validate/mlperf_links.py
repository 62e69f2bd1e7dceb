"""The link a submitted system's tensor-parallel all-reduces cross, from its own description.

A registry chip carries the scale-up link its usual board has (model.chip.Interconnect): an H100
NVL or H100 PCIe pair joined by NVLink bridges, 300 GB/s each way. A system may be built without
them. Its `systems/<system>.json` then says `"accelerator_interconnect": "N/A"` and names only the
host link, `"accelerator_host_interconnect": "PCIe Gen5 x16"` (ASUSTeK's ESC4000A-E12 with four
H100 NVL, and its ESC8000A-E12 with eight H100 PCIe, in v4.1). Such a system's all-reduces cross
PCIe, so its LLM rows are served with that link.

    per direction = lanes x transfer rate x 128/130 / 8 bits      (bytes/s)

Transfer rates per lane: Gen3 8, Gen4 16 and Gen5 32 GT/s, all with 128b/130b encoding (PCI-SIG,
PCI Express Base Specification, revisions 3.0, 4.0 and 5.0). A Gen5 x16 link: 63.0 GB/s each
way. A chip whose registry link is already PCIe keeps it, and a system that names an
accelerator interconnect, or says nothing (a round's summary_results.json has no such field),
keeps the registry's.
"""

from __future__ import annotations

import dataclasses
import re

from chipcal.model.chip import Chip, Interconnect
from chipcal.validate.mlperf import MlperfRow

GT_PER_S = {3: 8e9, 4: 16e9, 5: 32e9}         # PCI-SIG Base Specification, per lane
ENCODING = 128 / 130
_PCIE = re.compile(r"pcie\s*gen\s*(?P<gen>\d)\s*x\s*(?P<lanes>\d+)", re.IGNORECASE)


class UnreadLink(ValueError):
    """A system without an accelerator interconnect whose host link is not a PCIe generation and
    width read here."""


def pcie_link(text: str) -> Interconnect | None:
    """The PCIe link `text` names ("PCIe Gen5 x16"), or None if it names none read here."""
    match = _PCIE.search(text)
    if match is None or int(match["gen"]) not in GT_PER_S:
        return None
    gen, lanes = int(match["gen"]), int(match["lanes"])
    per_direction = lanes * GT_PER_S[gen] * ENCODING / 8
    return Interconnect(kind="pcie", per_direction_bytes_per_s=per_direction, domain_devices=None,
                        source=f"derived: the system's accelerator_host_interconnect '{text}': {lanes} lanes x "
                               f"{GT_PER_S[gen] / 1e9:g} GT/s x 128/130 / 8 (PCI-SIG, PCIe Base Specification)")


def with_system_link(row: MlperfRow, chip: Chip) -> Chip:
    """`chip` with the link `row`'s system says its accelerators have (module docstring);
    UnreadLink where the system has none and its host link is not read."""
    if row.accelerator_interconnect.strip().upper() != "N/A" or chip.interconnect is None \
            or chip.interconnect.kind == "pcie":
        return chip
    link = pcie_link(row.accelerator_host_interconnect)
    if link is None:
        raise UnreadLink(f"{row.system} has no accelerator interconnect and its host link "
                         f"'{row.accelerator_host_interconnect}' is not a PCIe generation and width")
    return dataclasses.replace(chip, interconnect=link)


def link_label(chip: Chip) -> str:
    """The link in a record: its kind and GB/s each way ("pcie 63 GB/s"); "" without one."""
    link = chip.interconnect
    return "" if link is None else f"{link.kind} {link.per_direction_bytes_per_s / 1e9:.3g} GB/s"
