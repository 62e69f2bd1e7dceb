"""`chipcal` umbrella: `chipcal SUBCOMMAND ...` dispatches to the per-tool CLI modules.

Subcommand modules are imported only when chosen, so `chipcal hardware list` never pays for torch.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from chipcal.cli.common import EXIT_USAGE, choice_error

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "hardware": ("chipcal.cli.hardware", "list or show registry chips with their sources"),
    "estimate-tdp": ("chipcal.cli.estimate_tdp", "physics TDP estimate and sweeps"),
    "compare-tdp-registry": ("chipcal.cli.compare_tdp_registry", "physics TDP vs spec TDP for registry chips"),
    "workload": ("chipcal.cli.workload", "operation counts, fusion and concurrency of a model"),
    "predict": ("chipcal.cli.predict", "latency/energy/memory prediction per model and chip"),
    "validate": ("chipcal.cli.validate", "predictions against published measurements (validation corpus)"),
    "measure-peak": ("chipcal.cli.measure_peak", "measure GEMM peak and memory bandwidth"),
    "measure-model-efficiency": ("chipcal.cli.measure_model_efficiency", "measure model latency and efficiency"),
    "calibrate": ("chipcal.cli.calibrate", "measure this machine, fit the model, write a report"),
    "fleet": ("chipcal.cli.fleet", "calibrate a fleet through Slurm (or here) into a shared store; find slow nodes"),
    "report": ("chipcal.cli.report", "calibration runs side by side, the results index, report.html, two runs compared"),
}


def _usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = ["usage: chipcal SUBCOMMAND [options]   (chipcal SUBCOMMAND --help for its options)", ""]
    lines += [f"  {name:<{width}}  {desc}" for name, (_, desc) in SUBCOMMANDS.items()]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(_usage())
        return 0 if args else EXIT_USAGE
    name, rest = args[0].replace("_", "-"), args[1:]
    if name not in SUBCOMMANDS:
        sys.stderr.write(f"chipcal: error: {choice_error('subcommand', args[0], SUBCOMMANDS)}\n")
        return EXIT_USAGE
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return module.main(rest, prog=f"chipcal {name}")


if __name__ == "__main__":
    raise SystemExit(main())
