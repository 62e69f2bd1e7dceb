"""chipcal's cache root, and the measurement cache in it (never the repository).

One root for everything chipcal caches: `$CHIPCAL_CACHE_DIR`, else `$XDG_CACHE_HOME/chipcal`, else
`~/.cache/chipcal` (`cache_root`); measurements live in its `measurements/` folder, workload
characterizations (src/chipcal/measure/workloads.py) in `workloads/`.

Measurements: one JSON file per (probe, device, machine slug). A file is reused only when its schema and
environment key (fingerprint slug, torch version, threads, ATen ISA and its overrides, CPU
affinity, driver …) equal the current ones; a stale or unreadable file is ignored (the caller
warns with `CacheWarning`) and rewritten after measuring. Writers merge their entries into the
file under a lock; the probes never serve an entry that holds an unstable measurement.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from chipcal.measure.device import Device

SCHEMA = 2      # 2: one file per probe, entries merged under a lock
CACHE_ENV = "CHIPCAL_CACHE_DIR"


class CacheWarning(UserWarning):
    """A cache file was ignored (stale or corrupt)."""


def warn(message: str, notes: list[str]) -> None:
    """Warn (CacheWarning) and keep the message in the measurement's notes."""
    warnings.warn(message, CacheWarning, stacklevel=3)
    notes.append(message)


def load_or_empty(path: Path, key: dict, use_cache: bool, notes: list[str]) -> dict:
    """The cached payload, or a fresh one when it is absent, stale, corrupt or not wanted."""
    if not use_cache:
        return {}
    payload, problem = load(path, key)
    if problem:
        warn(problem, notes)
    return payload or {}


def holds_unstable(entry: dict) -> bool:
    """Whether a cached entry holds a measurement that was unstable when taken (never served).
    A malformed entry is not judged here: its reader reports it as corrupt."""
    from chipcal.measure.timing import Measurement

    try:
        return any(Measurement.from_dict(d["measurement"]).unstable for d in entry.get("points", []))
    except (KeyError, TypeError, ValueError, AttributeError):
        return False


def cache_root() -> Path:
    """$CHIPCAL_CACHE_DIR, else $XDG_CACHE_HOME/chipcal, else ~/.cache/chipcal (an empty
    variable counts as unset, as the XDG spec says)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "chipcal"


def cache_dir() -> Path:
    """The measurement cache: <cache root>/measurements."""
    return cache_root() / "measurements"


def workload_dir() -> Path:
    """The workload-characterization cache: <cache root>/workloads."""
    return cache_root() / "workloads"


def cache_path(probe: str, device: Device, slug: str) -> Path:
    """One file per probe ("gemm", "bandwidth"), device and machine."""
    safe_device = re.sub(r"[^a-z0-9]+", "", str(device))
    return cache_dir() / f"{probe}-{safe_device}-{slug}.json"


def _read(path: Path) -> tuple[dict | None, str | None]:
    """(document, None); (None, why) when it is corrupt; (None, None) when there is no file."""
    if not path.exists():
        return None, None
    try:
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or not isinstance(doc.get("payload"), dict):
            raise ValueError("not a chipcal cache document")
    except (OSError, ValueError) as exc:
        return None, f"ignoring corrupt measurement cache {path}: {exc}"
    return doc, None


def load(path: Path, key: dict) -> tuple[dict | None, str | None]:
    """(payload, None) when `path` holds this schema and key; (None, why) when it is stale or
    corrupt; (None, None) when there is no file."""
    doc, problem = _read(path)
    if doc is None:
        return None, problem
    if doc.get("schema") != SCHEMA or doc.get("key") != key:
        old = doc.get("key") if isinstance(doc.get("key"), dict) else {}
        changed = sorted(k for k in set(key) | set(old) if old.get(k) != key.get(k))
        return None, (f"ignoring stale measurement cache {path}: measured under a different "
                      f"{', '.join(changed) or 'schema'}; remeasuring")
    return doc["payload"], None


def load_matching(path: Path, accept: Callable[[dict], bool]) -> dict | None:
    """The payload of `path` when it holds this schema and `accept(key)` (a check of part of the
    key: what a caller can know without torch); None otherwise."""
    doc, _ = _read(path)
    key = doc.get("key") if doc is not None and doc.get("schema") == SCHEMA else None
    return doc["payload"] if isinstance(key, dict) and accept(key) else None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on `path`.lock for the read-merge-write of one cache file, so
    concurrent runs (two precisions measured at once) never erase each other's entries."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def write_json_atomic(path: Path, document: object, allow_nan: bool = False) -> None:
    """Temp file + fsync + rename + directory fsync: a crash leaves the old file or the new one,
    never half of one, and no temp file is left behind on an error."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(document, allow_nan=allow_nan))     # one shot: json's C encoder (json.dump streams in Python)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def update(path: Path, key: dict, entries: dict) -> None:
    """Merge `entries` into the payload of `path` under its lock (entries of other names, written
    by a concurrent run under the same key, are kept); a stale or corrupt file is replaced."""
    with _locked(path):
        payload, _ = load(path, key)
        write_json_atomic(path, {"schema": SCHEMA, "key": key, "payload": {**(payload or {}), **entries}})


def source_digest(package: str):
    """A sha256 over every module of `package` and its sub-packages (relative path and bytes), found
    without running any of it: what a cache of results worked out by that code is keyed on, so
    that a change to the code invalidates it (measure.workloads, report.run_index)."""
    h = hashlib.sha256()
    for loc in importlib.util.find_spec(package).submodule_search_locations:
        for path in sorted(Path(loc).rglob("*.py")):
            h.update(path.relative_to(loc).as_posix().encode())
            h.update(path.read_bytes())
    return h
