"""Calibration directories: written atomically, never overwritten, listed side by side.

A run is staged in a hidden sibling directory and renamed into place only when every file is
written and flushed, so an interrupted run leaves no half-written report. The final directory is
claimed with `os.mkdir` (atomic: two runs finishing in the same second get T and T-2, never the
same one). If the write fails, the calibration document is saved to a fallback file and the
error names it, so a finished calibration is never lost to a full disk or a bad --out.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from chipcal.calibrate.document import (
    READABLE_SCHEMAS,
    SCHEMA,
    CalibrationDocument,
    ParametersDocument,
)
from chipcal.model.errors import ResultsWriteError
from chipcal.model.mapping.params import CalibrationError, CalibrationParams

CALIBRATION_FILE = "calibration.json"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def claim_run_dir(results_root: Path, slug: str, timestamp: str) -> Path:
    """Create and return results_root/slug/timestamp, or timestamp-2, -3… if taken.

    `os.mkdir` either creates the directory or fails, so of two runs racing for one name exactly
    one gets it; the claimed directory stays empty until the finished run is renamed onto it.
    """
    base = Path(results_root) / slug
    base.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        candidate = base / (timestamp if n == 1 else f"{timestamp}-{n}")
        try:
            os.mkdir(candidate)
            return candidate
        except FileExistsError:
            n += 1


def check_writable(results_root: Path) -> None:
    """Fail now, not after an hour of measuring, if results_root cannot take a run.

    Creates the directory and writes (then removes) a small probe file in it.
    """
    root = Path(results_root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".chipcal-probe-", dir=root)
        try:
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        raise ResultsWriteError(f"cannot write results to {root}: {exc.strerror or exc}") from None


def write_run(results_root: Path, slug: str, timestamp: str,
              writers: dict[str, Callable[[Path], None]], fallback: dict | None = None) -> Path:
    """Call each writer(path) into a staging dir, then rename the whole dir into place.

    On any exception (KeyboardInterrupt included) the staging dir is removed and nothing
    appears under results_root/slug except what was there before. If an error (not an
    interrupt) stops the write and `fallback` is given, that document is saved by
    `save_fallback` and a ResultsWriteError names the file.
    """
    try:
        final = claim_run_dir(results_root, slug, timestamp)
    except OSError as exc:
        raise _write_failed(Path(results_root) / slug, exc, fallback) from None
    staging = final.parent / f".staging-{final.name}-{os.getpid()}"
    try:
        staging.mkdir()
        for name, write in writers.items():
            path = staging / name
            write(path)
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(staging)
        os.rename(staging, final)
        _fsync_dir(final.parent)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        with contextlib.suppress(OSError):
            final.rmdir()       # only if still empty: the claim is released
        if isinstance(exc, Exception):
            raise _write_failed(final, exc, fallback) from exc
        raise
    return final


def _write_failed(where: Path, exc: Exception, fallback: dict | None) -> ResultsWriteError:
    reason = getattr(exc, "strerror", None) or f"{type(exc).__name__}: {exc}"
    if fallback is None:
        return ResultsWriteError(f"cannot write {where}: {reason}")
    saved = save_fallback(fallback)
    if saved is None:
        return ResultsWriteError(f"cannot write {where}: {reason}; no fallback location was writable either")
    return ResultsWriteError(f"cannot write {where}: {reason}; the calibration document was saved to {saved}")


def save_fallback(document: dict) -> Path | None:
    """Write `document` to a new chipcal-calibration-*.json in $TMPDIR, else in the home directory.

    Returns the file, or None when neither place can take it.
    """
    text = dumps(document)
    for directory in (tempfile.gettempdir(), Path.home()):
        try:
            fd, name = tempfile.mkstemp(prefix="chipcal-calibration-", suffix=".json", dir=directory)
        except OSError:
            continue
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            return Path(name)
        except OSError:
            Path(name).unlink(missing_ok=True)
    return None


def json_safe(document: object) -> tuple[object, list[str]]:
    """A copy of `document` with every NaN/±inf float replaced by null, and the paths replaced.

    JSON has no NaN; a non-finite number means "not determined" (e.g. R² of constant readings),
    which null says without breaking strict JSON readers.
    """
    replaced: list[str] = []

    def walk(value: object, where: str) -> object:
        if isinstance(value, dict):
            return {k: walk(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if hasattr(value, "item") and not isinstance(value, str):   # numpy scalar
            value = value.item()
        if isinstance(value, float) and not math.isfinite(value):
            replaced.append(f"{where} ({value})")
            return None
        return value

    return walk(document, ""), replaced


def dumps(document: dict) -> str:
    """Strict JSON text; non-finite numbers become null and are listed under `non_finite_values`."""
    clean, replaced = json_safe(document)
    if replaced:
        clean["non_finite_values"] = {
            "reason": "not a finite number (e.g. undefined R² for constant readings); written as null",
            "paths": replaced}
    return json.dumps(clean, indent=2, allow_nan=False) + "\n"


def json_writer(document: dict) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_text(dumps(document))

    return write


def text_writer(text: str) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_text(text)

    return write


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _read(directory: str | Path) -> tuple[dict, Path]:
    """The JSON object in a run directory's calibration.json and the file's path; the schema
    must be one this code reads (SCHEMA, or an older one calibrate.document upgrades) and
    NaN/Infinity literals are refused (CalibrationError, one line)."""
    path = Path(directory) / CALIBRATION_FILE
    try:
        doc = json.loads(path.read_bytes(), parse_constant=_no_constant)
    except FileNotFoundError:
        raise CalibrationError(f"no {CALIBRATION_FILE} in {directory} (write one with `chipcal calibrate`)") from None
    except OSError as exc:
        raise CalibrationError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:   # bad JSON, bad UTF-8, NaN literal, deep nesting
        raise CalibrationError(f"{path}: not a readable calibration document ({str(exc)[:80]})") from None
    if not isinstance(doc, dict):
        raise CalibrationError(f"{path}: not a calibration document (a JSON {type(doc).__name__}, expected an object)")
    if doc.get("schema") not in READABLE_SCHEMAS:
        raise CalibrationError(f"{path}: schema {str(doc.get('schema'))[:40]!r}, expected {SCHEMA!r} "
                               "(an older or foreign file; run `chipcal calibrate` again)")
    return doc, path


def _typed(cls, data: dict, path: Path):
    try:
        return cls.from_dict(data)
    except CalibrationError as exc:
        raise CalibrationError(f"{path}: {exc}") from None


def load(directory: str | Path) -> CalibrationDocument:
    """The calibration document of a run directory; CalibrationError (a ValueError) names the
    file and the field that is missing or wrong."""
    data, path = _read(directory)
    return _typed(CalibrationDocument, data, path)


def load_calibration(directory: str | Path) -> CalibrationParams:
    """The fitted parameters of a run directory, for `predict --calibration`: only the
    parameters and the chip's memory are read (calibrate.document.ParametersDocument)."""
    data, path = _read(directory)
    return _typed(ParametersDocument, data, path).calibration_params(path)


def find_runs(results_root: Path) -> list[Path]:
    """Every completed calibration directory under results_root (staging dirs skipped)."""
    root = Path(results_root)
    runs = [p.parent for p in root.rglob(CALIBRATION_FILE)
            if not any(part.startswith(".") for part in p.relative_to(root).parts)]
    return sorted(runs)
