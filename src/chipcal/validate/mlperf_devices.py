"""Which registry chip an MLPerf system's accelerator is (a CPU-only system: its processor).

Two steps, the first that answers wins:
1. `ACCELERATOR_CHIPS`: the exact accelerator_model_name (host_processor_model_name) strings of
   v4.1's closed division, compared lower-case.
2. `NAME_RULES`: for a name no round so far has spelled that way (a later round's new system of a
   chip the registry holds), the chip's model designation among the name's words: the words of
   the name split at anything not a letter, digit or "+", lower-case. A rule names the words the
   name must hold, and the words that would make it another part. Partitions of a GPU (NVIDIA
   MIG) match none: they are a fraction of the chip.
A name neither step knows is unknown: `validate --mlperf` refuses it in one line that names it.
"""

from __future__ import annotations

import re

# The registry chip of each accelerator_model_name of v4.1's closed division (a CPU-only system:
# its host_processor_model_name). "-CTS": NVIDIA's custom thermal solution of the same H200 SXM
# part; "Preview" and "Slim": two speedAI240 boards of the same chip.
ACCELERATOR_CHIPS = {name.lower(): chip for name, chip in {
    "NVIDIA H100-SXM-80GB": "h100-sxm5",
    "NVIDIA H100-PCIe-80GB": "h100-pcie",
    "NVIDIA H100-NVL-94GB": "h100-nvl",
    "NVIDIA H200-SXM-141GB": "h200-sxm",
    "NVIDIA H200-SXM-141GB-CTS": "h200-sxm",
    "NVIDIA GH200 Grace Hopper Superchip 96GB": "gh200-96gb",
    "NVIDIA GH200 Grace Hopper Superchip 144GB": "gh200-144gb",
    "NVIDIA B200-SXM-180GB": "b200",
    "NVIDIA L40S": "l40s",
    "NVIDIA L4": "l4",
    "NVIDIA A100-SXM-80GB": "a100-sxm4-80gb",
    "NVIDIA Jetson AGX Orin 64G": "jetson-agx-orin-64gb",
    "AMD Instinct MI300X-NPS1-SPX-192GB-750W": "mi300x",
    "AMD MI300X-NPS1-SPX-192GB-750W": "mi300x",
    "TPU v5e": "tpu-v5e",
    "TPU v6": "tpu-v6e",
    "UntetherAI speedAI240 Slim": "speedai240",
    "UntetherAI speedAI240 Preview": "speedai240",
    "INTEL(R) XEON(R) PLATINUM 8592+": "xeon-platinum-8592-plus",
    "INTEL(R) XEON(R) 6980P": "xeon-6980p",
}.items()}

# mapped chips the registry does not hold, and why
NOT_IN_REGISTRY = {
    "speedai240": ("UntetherAI speedAI240: its public figures (Hot Chips 2022 reports: 2 PFLOPS fp8, 1 PFLOPS bf16) "
                   "do not say whether they are dense, and give no int8 peak, memory bandwidth or TDP"),
}

# (words the name holds, words it must not hold, chip), first match wins; more specific parts first
NAME_RULES: tuple[tuple[frozenset[str], frozenset[str], str], ...] = tuple(
    (frozenset(need.split()), frozenset(avoid.split()), chip) for need, avoid, chip in (
        ("gh200 144gb", "", "gh200-144gb"),
        ("gh200 96gb", "", "gh200-96gb"),
        ("gb200", "", "gb200"),
        ("b200", "", "b200"),
        ("b100", "", "b100"),
        ("h200 nvl", "", "h200-nvl"),
        ("h200", "nvl pcie", "h200-sxm"),
        ("h100 pcie", "", "h100-pcie"),
        ("h100 nvl", "", "h100-nvl"),
        ("h100", "nvl pcie", "h100-sxm5"),
        ("a100 pcie 80gb", "", "a100-pcie-80gb"),
        ("a100 40gb", "pcie", "a100-sxm4-40gb"),
        ("a100 80gb", "pcie", "a100-sxm4-80gb"),
        ("l40s", "", "l40s"),
        ("l40", "", "l40"),
        ("l4", "", "l4"),
        ("t4", "", "t4"),
        ("v100 sxm2", "", "v100-sxm2"),
        ("mi300x", "", "mi300x"),
        ("mi325x", "", "mi325x"),
        ("mi355x", "", "mi355x"),
        ("jetson agx orin 64gb", "", "jetson-agx-orin-64gb"),
        ("jetson agx orin 64g", "", "jetson-agx-orin-64gb"),
        ("jetson orin nano 8gb", "", "jetson-orin-nano-8gb"),
        ("tpu v6e", "", "tpu-v6e"),
        ("tpu v6", "", "tpu-v6e"),              # v4.1's name of Trillium, the v6e
        ("tpu trillium", "", "tpu-v6e"),
        ("tpu v5e", "", "tpu-v5e"),
        ("tpu v5p", "", "tpu-v5p"),
        ("tpu v4", "", "tpu-v4"),
        ("rtx 4090", "", "rtx-4090"),
        ("rtx 6000 ada", "", "rtx-6000-ada"),
        ("speedai240", "", "speedai240"),
        ("xeon 6980p", "", "xeon-6980p"),
        ("xeon 8592+", "", "xeon-platinum-8592-plus"),
        ("xeon 8480+", "", "xeon-platinum-8480-plus"),
        ("epyc 9654", "", "epyc-9654"),
    ))
PARTITION_WORDS = frozenset({"mig"})     # a slice of a GPU, not the chip


def words(name: str) -> frozenset[str]:
    """The name's words (module docstring): "NVIDIA H100-SXM-80GB" -> {nvidia, h100, sxm, 80gb}."""
    return frozenset(w for w in re.split(r"[^a-z0-9+]+", name.lower()) if w)


def chip_named(name: str) -> str | None:
    """The registry chip (or NOT_IN_REGISTRY name) of an accelerator or processor name, None when
    neither the exact names nor the rules know it (module docstring)."""
    exact = ACCELERATOR_CHIPS.get(name.lower())
    if exact is not None:
        return exact
    held = words(name)
    if held & PARTITION_WORDS:
        return None
    return next((chip for need, avoid, chip in NAME_RULES if need <= held and not avoid & held), None)
