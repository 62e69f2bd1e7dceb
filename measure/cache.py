"""Measurement cache in the user's cache directory (never the repository).

One JSON file per (device, machine slug). A file is reused only when its schema and environment
key (fingerprint slug, torch version, threads, driver …) equal the current ones; a stale or
unreadable file is ignored (the caller warns with `CacheWarning`) and rewritten after measuring.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

SCHEMA = 1


class CacheWarning(UserWarning):
    """A cache file was ignored (stale or corrupt)."""


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/chipcal, or ~/.cache/chipcal."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "chipcal"


def cache_path(kind: str, device: str, slug: str) -> Path:
    safe_device = re.sub(r"[^a-z0-9]+", "", device.lower())
    return cache_dir() / f"{kind}-{safe_device}-{slug}.json"


def load(path: Path, key: dict) -> tuple[dict | None, str | None]:
    """(payload, None) when `path` holds this schema and key; (None, why) when it is stale or
    corrupt; (None, None) when there is no file."""
    if not path.exists():
        return None, None
    try:
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or not isinstance(doc.get("payload"), dict):
            raise ValueError("not a chipcal cache document")
    except (OSError, ValueError) as exc:
        return None, f"ignoring corrupt measurement cache {path}: {exc}"
    if doc.get("schema") != SCHEMA or doc.get("key") != key:
        old = doc.get("key") if isinstance(doc.get("key"), dict) else {}
        changed = sorted(k for k in set(key) | set(old) if old.get(k) != key.get(k))
        return None, (f"ignoring stale measurement cache {path}: measured under a different "
                      f"{', '.join(changed) or 'schema'}; remeasuring")
    return doc["payload"], None


def save(path: Path, key: dict, payload: dict) -> None:
    """Write atomically (temp file + rename), so an interrupted write never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump({"schema": SCHEMA, "key": key, "payload": payload}, f)
    os.replace(tmp, path)
