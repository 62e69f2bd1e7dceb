"""Shared CLI plumbing: one-line usage errors (exit 2), list/number parsing, table/JSON output.

Every CLI module exposes `build_parser()` and `main(argv=None) -> int`; the console scripts and
the `chipcal` umbrella both call `main`. A user mistake raises `UsageError` (or calls
`parser.error`) and ends as one line on stderr with exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from chipcal.measure.device import Device
from chipcal.model.errors import ChipcalError, unknown_name_message

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130          # 128 + SIGINT, as shells report a Ctrl-C
# Upper bounds for numbers typed on the command line: far above any real chip or run, far below
# float overflow (1e308 GHz once went through as inf and came out as '-').
MAX_NUMBER = 1e15
MAX_BATCH = 1 << 20
TERMINAL_COLUMNS = 120          # every line of a table or note a person reads fits this (issue 39)


class UsageError(ChipcalError):
    """A user mistake: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line (no usage dump) and exit 2."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse API
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def run(main_body: Callable[[argparse.Namespace], int], parser: argparse.ArgumentParser,
        argv: Sequence[str] | None) -> int:
    """Parse argv and run `main_body`: a library error or a file the OS refuses ends as one line
    and exit 2, Ctrl-C as one line and exit 130; never a traceback."""
    args = parser.parse_args(argv)
    try:
        return main_body(args)
    except ChipcalError as exc:  # UsageError and every library error: one line, exit 2
        sys.stderr.write(f"{parser.prog}: error: {exc}\n")
        return EXIT_USAGE
    except BrokenPipeError:  # e.g. piped into `head`
        return 0
    except OSError as exc:   # an output file or folder the OS refuses (missing, full, read-only)
        where = f": {exc.filename}" if exc.filename else ""
        sys.stderr.write(f"{parser.prog}: error: {exc.strerror or exc}{where}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write(f"{parser.prog}: interrupted\n")
        return EXIT_INTERRUPTED


def choice_error(kind: str, value: str, valid: Iterable[str]) -> UsageError:
    """'unknown <kind> X (did you mean Y?); valid: …' as a UsageError."""
    return UsageError(unknown_name_message(kind, value, list(valid)))


def csv_choices(kind: str, valid: Sequence[str]) -> Callable[[str], list[str]]:
    """argparse type: comma-separated names, each checked against `valid`."""

    def parse(text: str) -> list[str]:
        items = [t.strip().lower() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"empty {kind} list; valid: {', '.join(valid)}")
        for item in items:
            if item not in valid:
                raise argparse.ArgumentTypeError(str(choice_error(kind, item, valid)))
        return items

    return parse


def positive_float(text: str, maximum: float = MAX_NUMBER) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or not 0 < value <= maximum:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number up to {maximum:g}")
    return value


def positive_int(text: str, maximum: int = int(MAX_NUMBER)) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 < value <= maximum:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive integer up to {maximum:,}")
    return value


def at_most(parse: Callable[[str, float], float], maximum: float) -> Callable[[str], float]:
    """argparse type: `parse` (positive_float/positive_int) with a tighter upper bound."""
    return lambda text: parse(text, maximum)


def positive_int_list(text: str) -> list[int]:
    """argparse type for batch sizes: '1,8,64' -> [1, 8, 64], each a positive integer up to MAX_BATCH."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("empty list")
    return [positive_int(t, MAX_BATCH) for t in items]


def _clean(value: object) -> object:
    """JSON-safe scalar: NaN/inf become null, numpy scalars become Python numbers."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def print_json(records: Iterable[dict]) -> None:
    """An array of flat records on stdout."""
    rows = [{k: _clean(v) for k, v in r.items()} for r in records]
    json.dump(rows, sys.stdout, indent=2)
    sys.stdout.write("\n")


def print_table(rows, formats: dict[str, str] | None = None) -> None:
    """Records (list of dicts) or a DataFrame as an aligned text table.

    `formats` maps column -> format spec; None/NaN show as '-'. No pandas import here, so the
    physics-only CLIs start fast.
    """
    if hasattr(rows, "to_dict"):
        rows = rows.to_dict("records")
    rows = list(rows)
    if not rows:
        sys.stdout.write("(no rows)\n")
        return
    formats = formats or {}
    columns = list(rows[0])

    def cell(col: str, value: object) -> str:
        value = _clean(value)
        if value is None:
            return "-"
        if col in formats and isinstance(value, int | float) and not isinstance(value, bool):
            return format(value, formats[col])
        return str(value)

    cells = [[cell(c, r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    numeric = [all(_is_number(r.get(c)) for r in rows) for c in columns]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric, strict=True)).rstrip()

    out = [line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells]
    sys.stdout.write("\n".join(out) + "\n")


def _is_number(value: object) -> bool:
    value = _clean(value)
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def load_registry_warn():
    """The packaged registry; malformed files are reported on stderr and skipped."""
    from chipcal.model.registry import load_registry

    registry = load_registry()
    for err in registry.errors:
        sys.stderr.write(f"warning: skipped registry file {err}\n")
    return registry


def csv_list(text: str) -> list[str]:
    """argparse type: 'a,b' -> ['a', 'b'] (validated later against a registry)."""
    items = [t.strip().lower() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("empty list")
    return items


def device_arg(text: str) -> Device:
    """argparse type: the device a command measures on (cpu, cuda, cuda:N), parsed once, here."""
    try:
        return Device.parse(text)
    except ChipcalError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def subcommand(name: str):
    """The module of `chipcal NAME` (chipcal.cli.<name with _ for ->), for a command that runs
    another in its own process: `chipcal fleet` runs `chipcal calibrate` on each node."""
    import importlib

    return importlib.import_module(f"chipcal.cli.{name.replace('-', '_')}")


def output_file(text: str) -> str:
    """argparse type for a file the command will write: checked before any work is done."""
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; give a file name")
    parent = path.resolve().parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text}: folder {parent} is not writable")
    return text


class RowWriter:
    """Appends each record to a CSV file as soon as it exists (rows survive a Ctrl-C)."""

    def __init__(self, path: str | None, fields: Sequence[str]):
        self.path, self.fields = path, list(fields)
        if path:
            with open(path, "w", newline="") as f:
                csv.DictWriter(f, self.fields).writeheader()

    def write(self, record: dict) -> None:
        if self.path:
            with open(self.path, "a", newline="") as f:
                csv.DictWriter(f, self.fields, extrasaction="ignore").writerow(record)


def write_notes(rows: Sequence[dict], notes: Iterable[str], logical_cores: int) -> None:
    """`note: …` lines: the reference's notes, then a warning when other work loaded the machine
    while the rows (with their `other_cpus`) were measured."""
    from chipcal.measure.system import busy_note

    others = [r["other_cpus"] for r in rows if r["other_cpus"] is not None]
    for note in (*notes, busy_note(max(others, default=None), logical_cores)):
        if note:
            sys.stdout.write(f"note: {note}\n")


def interrupted_exit(prog: str, rows: Sequence[dict]) -> int:
    """Say that a Ctrl-C ended the measurements and how many rows were kept; the exit status."""
    sys.stderr.write(f"{prog}: interrupted; {len(rows)} row(s) kept\n")
    return EXIT_INTERRUPTED


def print_wrapped(text: str, indent: str = "") -> None:
    """`text` as lines of at most TERMINAL_COLUMNS, the first indented by `indent` and the rest by
    two more spaces (a note or a summary line a person reads)."""
    print(textwrap.fill(text, width=TERMINAL_COLUMNS, initial_indent=indent, subsequent_indent=indent + "  ",
                        break_on_hyphens=False, break_long_words=False))


def note(line: str) -> None:
    """One line of a library's notes (a WorkloadSource's `notify`: characterizing, a cache entry
    unusable) on stderr, above any tqdm bar drawn there rather than through it."""
    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)


class Measuring:
    """`with Measuring(total, desc) as bar:` a measurement loop with a tqdm bar on stderr (stdout
    stays for the table/JSON). A Ctrl-C ends the loop, not the command: the rows measured so far
    are kept and `interrupted` is set (see `interrupted_exit`)."""

    def __init__(self, total: int, desc: str):
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=desc, file=sys.stderr, unit="pt", dynamic_ncols=True, leave=False)
        self.interrupted = False

    def __enter__(self):
        return self.bar

    def __exit__(self, kind, exc, traceback) -> bool:
        self.bar.close()
        self.interrupted = kind is not None and issubclass(kind, KeyboardInterrupt)
        return self.interrupted


def plot_path(text: str) -> str:
    """argparse type for --plot: a writable .png or .svg file name."""
    if not text.lower().endswith((".png", ".svg")):
        raise argparse.ArgumentTypeError(f"plot file must end in .png or .svg, got {text!r}")
    return output_file(text)


def save_figure(fig, path: str) -> None:
    """Write a matplotlib figure (format from the suffix) and say where."""
    fig.savefig(path, dpi=120, bbox_inches="tight")
    sys.stderr.write(f"wrote {path}\n")
