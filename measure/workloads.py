"""Workload characterizations cached on disk, so repeated predictions need no torch.

Each (model, batch, fused|eager) is characterized once (torch, meta tensors) and stored under
$CHIPCAL_CACHE_DIR (default ~/.cache/chipcal/workloads), keyed by a hash of the workload code
and the torch/torchvision versions: a change to either invalidates the entry.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pickle
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

CACHE_ENV = "CHIPCAL_CACHE_DIR"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "chipcal" / "workloads")


def _code_key() -> str:
    """Hash of the workload code and the torch/torchvision versions: a change invalidates the cache."""
    h = hashlib.sha256()
    spec = importlib.util.find_spec("chipcal.model.workload")  # locates the package, runs none of it
    for path in sorted(p for loc in spec.submodule_search_locations for p in Path(loc).glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    for dist in ("torch", "torchvision"):
        try:
            h.update(metadata.version(dist).encode())
        except metadata.PackageNotFoundError:
            h.update(b"-")
    return h.hexdigest()[:16]


class WorkloadSource:
    """Characterizes (model, batch) once, from the disk cache when it has it.

    `notify` receives one-line notes (characterizing, cache not writable); the library never prints.
    Raises UnknownModelError or CaptureError (both ChipcalError) for a model it cannot characterize.
    """

    def __init__(self, use_cache: bool = True, notify: Callable[[str], None] = lambda _: None):
        self.use_cache = use_cache
        self.notify = notify
        self.memo: dict[tuple[str, int, bool], object] = {}
        self.key = _code_key() if use_cache else ""

    def _path(self, model: str, batch: int, fuse: bool) -> Path:
        return cache_dir() / f"{model}-b{batch}-{'fused' if fuse else 'eager'}-{self.key}.pkl"

    def get(self, model: str, batch: int, fuse: bool = True):
        if (model, batch, fuse) in self.memo:
            return self.memo[(model, batch, fuse)]
        workload = self._load(model, batch, fuse) if self.use_cache else None
        if workload is None:
            from chipcal.model.workload import characterize_model

            self.notify(f"characterizing {model} at batch {batch} (torch, meta tensors)...")
            workload = characterize_model(model, batch, fuse=fuse)
            if self.use_cache:
                self._store(model, batch, fuse, workload)
        self.memo[(model, batch, fuse)] = workload
        return workload

    def _load(self, model: str, batch: int, fuse: bool):
        try:
            with open(self._path(model, batch, fuse), "rb") as f:
                return pickle.load(f)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
            return None

    def _store(self, model: str, batch: int, fuse: bool, workload) -> None:
        path = self._path(model, batch, fuse)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            with open(tmp, "wb") as f:
                pickle.dump(workload, f, protocol=pickle.HIGHEST_PROTOCOL)
            tmp.replace(path)
        except OSError as exc:
            self.notify(f"warning: cannot cache the workload in {path.parent}: {exc}")



