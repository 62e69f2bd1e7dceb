"""CPU detection on fake /proc and /sys trees, the local chip's peaks by hand, registry matching."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chipcal.measure import system
from chipcal.measure.device import CPU, Device
from chipcal.measure.match import match_registry_chip
from chipcal.measure.system import Fingerprint, detect_cpu
from chipcal.model.local import CpuSpec, chip_from_cpu
from chipcal.model.registry import Registry, chip_from_dict, load_registry

SPR_FLAGS = "fpu sse2 avx avx2 fma avx512f avx512_bf16 avx512_fp16 avx512_vnni amx_bf16 amx_tile amx_int8 hypervisor"


def fake_machine(tmp_path: Path, *, model: str, flags: str, cpus: int = 4, threads_per_core: int = 2,
                 mhz: float = 2600.0, max_khz: int | None = None) -> tuple[Path, Path]:
    proc, sys_ = tmp_path / "proc", tmp_path / "sys"
    proc.mkdir(parents=True)
    blocks = [f"processor\t: {i}\nvendor_id\t: GenuineIntel\nmodel name\t: {model}\ncpu MHz\t\t: {mhz}\n"
              f"flags\t\t: {flags}\n" for i in range(cpus)]
    (proc / "cpuinfo").write_text("\n".join(blocks) + "\n")
    (proc / "meminfo").write_text("MemTotal:       24684084 kB\nMemFree:  1 kB\n")
    for i in range(cpus):
        d = sys_ / f"devices/system/cpu/cpu{i}"
        (d / "topology").mkdir(parents=True)
        (d / "topology/physical_package_id").write_text("0\n")
        (d / "topology/core_id").write_text(f"{i // threads_per_core}\n")
        for idx, (level, kind, size, shared) in enumerate(
                [(1, "Data", "48K", str(i)), (1, "Instruction", "32K", str(i)),
                 (2, "Unified", "2048K", str(i)), (3, "Unified", "107520K", f"0-{cpus - 1}")]):
            c = d / f"cache/index{idx}"
            c.mkdir(parents=True)
            for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
                (c / name).write_text(f"{value}\n")
        if max_khz:
            (d / "cpufreq").mkdir()
            (d / "cpufreq/cpuinfo_max_freq").write_text(f"{max_khz}\n")
            (d / "cpufreq/scaling_cur_freq").write_text(f"{max_khz // 2}\n")
    return proc, sys_


def test_detect_cpu_from_fake_tree(tmp_path):
    proc, sys_ = fake_machine(tmp_path, model="Intel(R) Xeon(R) Processor", flags=SPR_FLAGS)
    spec = detect_cpu(proc, sys_, arch="x86_64")
    assert (spec.cores, spec.threads_per_core) == (2, 2)          # 4 CPUs on 2 core ids
    assert (spec.simd_bits, spec.has_amx, spec.has_avx512_bf16, spec.has_vnni) == (512, True, True, True)
    assert spec.has_avx512_fp16
    assert (spec.l1d_bytes_per_core, spec.l2_bytes_per_core, spec.l3_bytes) == (48 * 1024, 2 * 2**20, 105 * 2**20)
    assert spec.memory_bytes == 24684084 * 1024
    assert spec.clock_hz == 2600e6 and "cpu MHz" in spec.clock_source and "TSC" in spec.clock_source
    assert spec.fma_units_per_core == 2 and spec.fma_source.startswith("assumed:")


def test_clock_preference_sysfs_then_model_name(tmp_path):
    proc, sys_ = fake_machine(tmp_path / "a", model="Intel(R) Xeon(R) Gold 6430 @ 2.10GHz", flags=SPR_FLAGS,
                              max_khz=3400000)
    spec = detect_cpu(proc, sys_, arch="x86_64")
    assert spec.clock_hz == 3.4e9 and "cpuinfo_max_freq" in spec.clock_source
    clocks = system.cpu_clocks(proc, sys_)
    assert clocks["current"][0] == 1.7e9 and "scaling_cur_freq" in clocks["current"][1]
    proc, sys_ = fake_machine(tmp_path / "b", model="Intel(R) Xeon(R) Gold 6430 @ 2.10GHz", flags=SPR_FLAGS)
    spec = detect_cpu(proc, sys_, arch="x86_64")
    assert spec.clock_hz == 2.1e9 and "model name" in spec.clock_source


def test_avx2_only_machine(tmp_path):
    proc, sys_ = fake_machine(tmp_path, model="AMD EPYC 7763 64-Core Processor", flags="sse2 avx avx2 fma")
    spec = detect_cpu(proc, sys_, arch="x86_64")
    assert (spec.simd_bits, spec.has_amx, spec.has_vnni, spec.has_avx512_bf16) == (256, False, False, False)


def test_detect_cpu_does_not_import_torch():
    code = ("import sys; from chipcal.measure.system import detect_cpu, local_chip; detect_cpu(); "
            "local_chip(); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def spec(**changes) -> CpuSpec:
    base = CpuSpec(model_name="Intel(R) Xeon(R) Processor", cores=2, threads_per_core=1, clock_hz=2.6e9,
                   clock_source="test", simd_bits=512, fma_units_per_core=2, has_avx512_bf16=True, has_vnni=True,
                   has_amx=True, l1d_bytes_per_core=48 * 1024, l2_bytes_per_core=2 * 2**20, l3_bytes=480 * 2**20,
                   memory_bytes=25 * 10**9, vendor="GenuineIntel")
    return dataclasses.replace(base, **changes)


def test_chip_from_cpu_peaks_by_hand():
    chip = chip_from_cpu(spec())
    # Intel (8480+ statements): per core per cycle FP32 64 FLOP (2 FMA × 16 lanes × 2),
    # VNNI 256 int8 ops, AMX 1024 bf16 / 2048 int8 ops. × 2 cores × 2.6 GHz:
    assert chip.peak_flop_per_s("fp32") == pytest.approx(64 * 2 * 2.6e9)        # 332.8 GFLOP/s
    assert chip.peak_flop_per_s("fp64") == pytest.approx(32 * 2 * 2.6e9)        # 166.4 GFLOP/s
    assert chip.peak_flop_per_s("bf16") == pytest.approx(1024 * 2 * 2.6e9)      # 5.32 TFLOP/s (AMX)
    assert chip.peak_flop_per_s("int8") == pytest.approx(2048 * 2 * 2.6e9)      # 10.6 TOPS (AMX)
    assert chip.engine_for("bf16").name == "amx" and chip.engine_for("fp32").circuit == "x86_performance"
    assert chip.name == "local-cpu" and chip.kind == "cpu"
    assert chip.tdp_w == pytest.approx(350 * 2 / 56)                            # 8480+ share, 12.5 W
    assert "assumed:" in chip.power_source and "assumed:" in chip.memory.source
    assert chip.memory.type == "ddr5" and chip.memory.capacity_bytes == 25e9
    assert chip.memory.bandwidth_bytes_per_s == pytest.approx(307.2e9 * 2 / 56)


def test_chip_from_cpu_without_amx_uses_avx512_rates():
    chip = chip_from_cpu(spec(has_amx=False))
    # AVX512_BF16 VDPBF16PS: 32 MAC per 512-bit op × 2 units = 64 MAC/clk; VNNI: 64 × 2 = 128 MAC/clk
    assert chip.peak_flop_per_s("bf16") == pytest.approx(2 * 64 * 2 * 2.6e9)    # 665.6 GFLOP/s
    assert chip.peak_flop_per_s("int8") == pytest.approx(2 * 128 * 2 * 2.6e9)   # 1.33 TOPS
    assert [e.name for e in chip.engines] == ["simd_fma"]


def test_chip_from_cpu_arm_and_measured_bandwidth():
    chip = chip_from_cpu(spec(arch="aarch64", vendor="", simd_bits=128, has_amx=False, has_avx512_bf16=False,
                              has_vnni=False, memory_bandwidth_bytes_per_s=20e9,
                              memory_bandwidth_source="measured: triad"))
    # NEON: 2 FMA pipes × 4 fp32 lanes = 8 MAC/clk/core → 2 × 8 × 2 cores × 2.6 GHz
    assert chip.peak_flop_per_s("fp32") == pytest.approx(2 * 8 * 2 * 2.6e9)
    assert chip.engines[0].circuit == "arm_core"
    assert chip.memory.bandwidth_bytes_per_s == 20e9 and "measured: triad" in chip.memory.source


def test_local_chip_builds_on_this_machine():
    chip = system.local_chip()
    assert chip.kind == "cpu" and chip.peak_flop_per_s("fp32") > 0


# --- registry matching -----------------------------------------------------------------------

def gpu_doc(name: str, sms: int, mem: float, tdp: float) -> dict:
    return {"name": name, "display_name": name, "vendor": "NVIDIA", "kind": "gpu", "process_nm": 4,
            "sources": ["datasheet"], "power": {"tdp_w": tdp, "source": "datasheet"},
            "memory": {"type": "hbm3", "bandwidth_bytes_per_s": 3e12, "capacity_bytes": mem, "source": "ds"},
            "microarch": {"sm_count": sms, "max_threads_per_sm": 2048, "l2_bytes": 50 * 2**20, "source": "ds"},
            "engines": [{"name": "tc", "circuit": "tensor_core", "units": sms * 4, "clock_hz": 1.8e9,
                         "macs_per_unit_per_clock": {"fp16": 512}, "source": "ds"}]}


# Datasheets: H100 SXM5 132 SMs / 80 GB / 700 W; H100 PCIe 114 SMs / 80 GB / 350 W; H200 132 SMs / 141 GB / 700 W
REGISTRY = Registry(chips={c.name: c for c in (
    chip_from_dict(gpu_doc("h100-sxm5", 132, 80e9, 700)),
    chip_from_dict(gpu_doc("h100-pcie", 114, 80e9, 350)),
    chip_from_dict(gpu_doc("h200-sxm", 132, 141e9, 700)),
)}, errors=())


def gpu_fp(name: str, sms: int, mem_mib: int, default_w: float | None) -> Fingerprint:
    base = dict.fromkeys(f.name for f in dataclasses.fields(Fingerprint))
    base.update(cpu_model="x", cpu_vendor="", arch="x86_64", physical_cores=16, logical_cores=32, torch_threads=16,
                cpu_features=(), cpu_clock_source="", cpu_max_clock_source="", memory_bytes=1, l3_bytes=1,
                gpu_count=1, gpu_index=0, python_version="3.11", slug="s", notes=(),
                gpu_name=name, gpu_sm_count=sms, gpu_memory_bytes=mem_mib * 2**20,
                gpu_default_power_limit_w=default_w, gpu_power_limit_w=default_w)
    return Fingerprint(**base)


# NVML totals as reported by the drivers: H100 80GB 81559 MiB, H200 143771 MiB
@pytest.mark.parametrize(("fp", "expected"), [
    (gpu_fp("NVIDIA H100 80GB HBM3", 132, 81559, 700), "h100-sxm5"),
    (gpu_fp("NVIDIA H100 PCIe", 114, 81559, 350), "h100-pcie"),
    (gpu_fp("NVIDIA H200", 132, 143771, 700), "h200-sxm"),
    # the name is not trusted: H200 numbers under an H100 name still match the H200
    (gpu_fp("NVIDIA H100 PCIe", 132, 143771, 700), "h200-sxm"),
    # H100 NVL (132 SMs, 94 GB, 400 W) is none of them
    (gpu_fp("NVIDIA H100 NVL", 132, 95830, 400), None),
    (gpu_fp("NVIDIA GeForce RTX 4090", 128, 24564, 450), None),
    # 132 SMs and 80 GB but a 350 W default limit is not an SXM5 part
    (gpu_fp("NVIDIA H100", 132, 81559, 300), None),
])
def test_gpu_matching_by_numbers(fp, expected):
    chip = match_registry_chip(fp, REGISTRY)
    assert (chip.name if chip else None) == expected


def test_vm_slice_of_a_registry_cpu_is_not_that_cpu():
    # a 2-vCPU VM whose CPU reports the 96-core EPYC 9654's name (AMD: 96 cores)
    registry = load_registry()
    fp = dataclasses.replace(gpu_fp("x", 1, 1, 1), gpu_name=None, cpu_model="AMD EPYC 9654 96-Core Processor",
                             physical_cores=2)
    assert match_registry_chip(fp, registry, CPU) is None
    assert match_registry_chip(dataclasses.replace(fp, physical_cores=96), registry, CPU).name == "epyc-9654"


@pytest.mark.parametrize(("name", "sms", "mib", "watts", "expected"), [
    # drivers name these without "NVIDIA" (nvidia-smi totals: T4 15360 MiB, V100 32GB 32510 MiB;
    # datasheets: T4 40 SMs, 16 GB, 70 W; V100 SXM2 80 SMs, 32 GB, 300 W)
    ("Tesla T4", 40, 15360, 70, "t4"),
    ("Tesla V100-SXM2-32GB", 80, 32510, 300, "v100-sxm2"),
    # the 16 GB V100 is another part than the registry's 32 GB one
    ("Tesla V100-SXM2-16GB", 80, 16160, 300, None),
])
def test_gpu_named_without_vendor_matches(name, sms, mib, watts, expected):
    registry = load_registry()
    if expected and expected not in registry.chips:
        pytest.skip(f"registry lacks {expected}")
    chip = match_registry_chip(gpu_fp(name, sms, mib, watts), registry)
    assert (chip.name if chip else None) == expected


def test_gpu_matched_by_pci_device_id_first():
    registry = load_registry()
    if "h200-sxm" not in registry.chips:
        pytest.skip("registry lacks h200-sxm")
    # pci-ids: 10de:2335 is GH100 [H200 SXM 141GB]; the ID decides even when the name says H100
    by_id = dataclasses.replace(gpu_fp("NVIDIA H100", 132, 81559, 700), gpu_pci_device_id="10de:2335")
    assert match_registry_chip(by_id, registry).name == "h200-sxm"
    # an ID no registry chip carries falls back to the numbers
    unknown = dataclasses.replace(gpu_fp("NVIDIA H100 80GB HBM3", 132, 81559, 700), gpu_pci_device_id="10de:ffff")
    assert match_registry_chip(unknown, registry).name == "h100-sxm5"


def test_gpu_matching_on_the_shipped_registry():
    registry = load_registry()
    needed = {"h100-sxm5", "h100-pcie", "h200-sxm"}
    if not needed <= set(registry.chips):
        pytest.skip(f"registry lacks {needed - set(registry.chips)}")
    assert match_registry_chip(gpu_fp("NVIDIA H100 80GB HBM3", 132, 81559, 700), registry).name == "h100-sxm5"
    assert match_registry_chip(gpu_fp("NVIDIA H100 PCIe", 114, 81559, 350), registry).name == "h100-pcie"
    assert match_registry_chip(gpu_fp("NVIDIA H200", 132, 143771, 700), registry).name == "h200-sxm"


def test_cpu_matching_by_model_string():
    registry = load_registry()
    if "xeon-platinum-8480-plus" not in registry.chips:
        pytest.skip("registry lacks xeon-platinum-8480-plus")
    # Intel ARK: the 8480+ has 56 cores
    fp = dataclasses.replace(gpu_fp("x", 1, 1, 1), gpu_name=None, cpu_model="Intel(R) Xeon(R) Platinum 8480+",
                             physical_cores=56)
    assert match_registry_chip(fp, registry).name == "xeon-platinum-8480-plus"
    # a VM slice with 16 of those cores is not the part: its peaks and TDP would be 3.5x too high
    assert match_registry_chip(dataclasses.replace(fp, physical_cores=16), registry) is None
    masked = dataclasses.replace(fp, cpu_model="Intel(R) Xeon(R) Processor")
    assert match_registry_chip(masked, registry) is None
    other = dataclasses.replace(fp, cpu_model="Intel(R) Xeon(R) Platinum 8468")
    assert match_registry_chip(other, registry) is None


def test_slug_is_stable_and_path_safe():
    a = system.machine_slug("Intel(R) Xeon(R) Processor", 2, 2, 25 * 2**30, ("avx2",))
    b = system.machine_slug("Intel(R) Xeon(R) Processor", 2, 2, 25 * 2**30, ("avx2",))
    c = system.machine_slug("Intel(R) Xeon(R) Processor", 4, 4, 25 * 2**30, ("avx2",))
    assert a == b != c
    assert re.fullmatch(r"[a-z0-9-]+", a) and a.startswith("intel-xeon-processor-2c-")


def test_fingerprint_of_this_machine():
    fp = system.fingerprint()
    again = system.fingerprint()
    assert fp.slug == again.slug and fp.physical_cores >= 1 and fp.torch_version
    d = fp.to_dict()
    assert d["slug"] == fp.slug and isinstance(d["cpu_features"], list)


def test_other_load_counts_other_processes_not_this_one():
    spin = "import time\nend = time.time() + 0.8\nwhile time.time() < end: pass"
    with system.OtherLoad() as other:
        subprocess.run([sys.executable, "-c", spin], check=True)
    # the child kept one CPU busy for most of the block (its start-up is in the window too)
    assert other.cpus is not None and other.cpus >= 0.3


def test_busy_note_threshold():
    # a quarter of the CPUs: 0.5 of 2
    assert system.busy_note(0.4, 2) is None
    assert "1.2 of 2 CPUs" in system.busy_note(1.2, 2)
    assert system.busy_note(None, 2) is None


def test_local_chip_takes_measured_bandwidth_and_cache_knee():
    from chipcal.measure.system import detect_cpu, local_chip

    reported_l3 = detect_cpu().l3_bytes
    knee = 32 * 2**20
    chip = local_chip(memory_bandwidth_bytes_per_s=20e9, llc_bytes=knee, measured_by="test probe")
    assert chip.memory.bandwidth_bytes_per_s == 20e9
    assert "measured" in chip.memory.source and "test probe" in chip.memory.source
    # the knee caps the OS-reported L3 (never raises it)
    assert chip.microarch["l3_bytes"] == (min(knee, reported_l3) if reported_l3 else knee)
    # compute peaks do not depend on memory measurements
    assert chip.peak_flop_per_s("fp32") == local_chip().peak_flop_per_s("fp32")


def test_identify_unknown_gpu_is_a_one_line_chipcal_error():
    from chipcal.measure.identify import UnknownDevice, identify
    from chipcal.model.errors import ChipcalError

    # an RTX 4090 D-like card (the registry holds the 128-SM 4090 only): numbers and ID match nothing
    fp = dataclasses.replace(gpu_fp("NVIDIA GeForce RTX 4090 D", 114, 24564, 425), gpu_pci_device_id="10de:2685")
    with pytest.raises(UnknownDevice) as info:
        identify(fp, Device("cuda", 0), load_registry())
    assert isinstance(info.value, ChipcalError) and "\n" not in str(info.value) and "src/chipcal/model/hardware" in str(info.value)


def test_identify_registry_cpu_only_with_its_core_count():
    from chipcal.measure.identify import identify

    registry = load_registry()
    fp = dataclasses.replace(gpu_fp("x", 1, 1, 1), gpu_name=None, cpu_model="AMD EPYC 9654 96-Core Processor",
                             physical_cores=96)
    assert identify(fp, CPU, registry).from_registry and identify(fp, CPU, registry).chip.name == "epyc-9654"


def test_the_cpu_is_detected_once_and_the_fingerprint_carries_it(tmp_path, monkeypatch):
    """fingerprint() detects the CPU; identify and the calibration's local chip take it from
    Fingerprint.cpu and never read /proc and /sys again."""
    from recorded import machine_tree

    from chipcal.measure.identify import identify

    proc, sys_ = machine_tree(tmp_path, "amd-epyc-avx2-2vcpu")
    spec = detect_cpu(proc, sys_, arch="x86_64")
    calls = []
    monkeypatch.setattr(system, "detect_cpu", lambda *a, **k: calls.append(a) or spec)
    fp = system.fingerprint()
    assert calls == [()] and fp.cpu is spec and fp.physical_cores == spec.cores == 2
    identity = identify(fp, CPU, load_registry())          # a 2-vCPU EPYC matches no registry chip
    chip = system.local_chip(memory_bandwidth_bytes_per_s=20e9, measured_by="probe", support=fp.cpu_precisions,
                             cpu=fp.cpu)
    assert not identity.from_registry and len(calls) == 1
    # 2 cores x 2 AVX2 FMA pipes x 8 fp32 lanes x 2 FLOP/FMA at the recorded clock
    assert identity.chip.peak_flop_per_s("fp32") == chip.peak_flop_per_s("fp32") == pytest.approx(
        2 * 2 * 8 * 2 * spec.clock_hz)
    # a document records the fingerprint's fields, not the spec: one read back equals it
    assert "cpu" not in fp.to_dict() and dataclasses.replace(fp, cpu=None) == fp
