"""Workload characterizations cached on disk, so repeated predictions need no torch.

Each (model, batch, partition: eager|fused|codegen) is characterized once (torch, meta tensors) and stored under
the `workloads/` folder of chipcal's cache root (src/chipcal/measure/cache.py: $CHIPCAL_CACHE_DIR, else
$XDG_CACHE_HOME/chipcal, else ~/.cache/chipcal), keyed by a hash of the workload code
and the torch/torchvision/transformers versions: a change to either invalidates the entry. An
LLM forward (llm_config.StepKey: config digest, phase, batch, tokens, cache, dtype, partition) is
stored the same way as an LlmStep.

The cache is data, never code: JSON (src/chipcal/model/workload/serialize.py) with a SHA-256 of its content,
checked on load. Only model names shaped like torchvision's (lowercase letters, digits, _) reach a
file name; other names go straight to characterization, which rejects them. A cache directory
that another user owns or that others can write is not used. Files are opened without following
symlinks, written through `mkstemp` and renamed into place. Any unreadable, altered or foreign
entry means: characterize again, with a one-line note.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from chipcal.measure.cache import source_digest, workload_dir, write_json_atomic
from chipcal.model.workload.fusion import PARTITIONS

FORMAT = "chipcal.workload/1"
SAFE_MODEL_NAME = re.compile(r"[a-z0-9][a-z0-9_]{0,63}")   # every torchvision model name has this shape


def _code_key() -> str:
    """Hash of the workload code and the torch/torchvision versions: a change invalidates the cache."""
    h = source_digest("chipcal.model.workload")
    for dist in ("torch", "torchvision", "transformers"):
        try:
            h.update(metadata.version(dist).encode())
        except metadata.PackageNotFoundError:
            h.update(b"-")
    return h.hexdigest()[:16]


def _digest(payload: dict) -> str:
    """SHA-256 of the workload's canonical JSON text (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def unsafe_directory(path: Path) -> str | None:
    """Why `path` must not hold a cache (another owner, writable by group/others, not a
    directory), or None when it is safe. The directory itself is checked without following a
    final symlink: a link could be swapped for one to somewhere else."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != os.geteuid():
        return f"it is owned by uid {st.st_uid}, not by you (uid {os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others can write it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


class WorkloadSource:
    """Characterizes (model, batch) once, from the disk cache when it has it.

    `notify` receives one-line notes (characterizing, cache entry unusable, cache directory not
    used); the library never prints. Raises UnknownModelError or CaptureError (both
    ChipcalError) for a model it cannot characterize.
    """

    def __init__(self, use_cache: bool = True, notify: Callable[[str], None] = lambda _: None):
        self.use_cache = use_cache
        self.notify = notify
        self.memo: dict[object, object] = {}
        self.key = _code_key() if use_cache else ""
        self._dir: Path | None = None
        self._dir_checked = False

    def _directory(self) -> Path | None:
        """The cache directory (created 0700 if missing), or None if it is not safe to use."""
        if not self._dir_checked:
            self._dir_checked = True
            path = workload_dir()
            try:
                path.mkdir(mode=0o700, parents=True, exist_ok=True)
                why = unsafe_directory(path)
            except OSError as exc:
                why = exc.strerror or str(exc)
            if why:
                self.notify(f"warning: not using the workload cache {path}: {why}")
            else:
                self._dir = path
        return self._dir

    def _path(self, model: str, batch: int, partition: str) -> Path | None:
        """The entry's file, or None when the name cannot safely be part of a file name."""
        directory = self._directory()
        if directory is None or not SAFE_MODEL_NAME.fullmatch(model) or type(batch) is not int or batch <= 0:
            return None
        return directory / f"{model}-b{batch}-{partition}-{self.key}.json"

    def llm_step(self, key):
        """The LlmStep `key` (llm_config.StepKey) names, worked out from traces the cache holds
        or made now (llm_layers.expanded_step: a deep model's few layers; torch and transformers,
        TransformersMissing without them)."""
        if key not in self.memo:
            from chipcal.model.workload.llm_layers import expanded_step

            self.memo[key] = expanded_step(key, self._traced_step)
        return self.memo[key]

    def _traced_step(self, key):
        """The forward of every layer of `key` traced (llm.trace_step), from the cache or traced
        now and kept there."""
        directory = self._directory() if self.use_cache else None
        path = directory / f"{key.slug}-{self.key}.json" if directory else None
        header = {"step": key.slug}
        step = self._load(path, header, "llm_step") if path else None
        if step is None:
            from chipcal.model.workload.llm import trace_step, transformers_module

            transformers_module(key.config.name)        # refused in one line, before the note
            self.notify(f"characterizing {key.config.name} {key.phase} at batch {key.batch}, "
                        f"{key.cached + key.tokens} tokens, {key.config.layers} layers (torch, meta tensors)...")
            step = trace_step(key)
            if path:
                self._store(path, header, "llm_step", step)
        return step

    def get(self, model: str, batch: int, partition: str = "fused"):
        """The Workload of torchvision model or MLPerf network `model`, or of the user's
        `file.py:factory` (never stored on disk: its code can change), at `batch`, partitioned into
        the kernels of a runtime (model.workload.fusion.PARTITIONS; mapping.params.runtime_partition)."""
        if partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {', '.join(PARTITIONS)}, got {partition!r}")
        if (model, batch, partition) in self.memo:
            return self.memo[(model, batch, partition)]
        from chipcal.model.workload.user_model import is_user_model

        if is_user_model(model):
            from chipcal.model.workload.user_model import characterize_user_model

            self.notify(f"characterizing {model} at batch {batch} (runs your file; torch, meta tensors)...")
            self.memo[(model, batch, partition)] = characterize_user_model(model, batch, partition)
            return self.memo[(model, batch, partition)]
        path = self._path(model, batch, partition) if self.use_cache else None
        header = {"model": model, "batch": batch, "partition": partition}
        workload = self._load(path, header, "workload") if path else None
        if workload is None:
            workload = self._characterize(model, batch, partition)
            if path:
                self._store(path, header, "workload", workload)
        self.memo[(model, batch, partition)] = workload
        return workload

    def _characterize(self, model: str, batch: int, partition: str):
        """A torchvision classification model, or an MLPerf network (model.workload.mlperf_networks),
        characterized now; an unknown name is refused in one line, before the note."""
        from chipcal.model.workload import (
            UnknownModelError,
            characterize_model,
            classification_models,
        )
        from chipcal.model.workload.mlperf_networks import (
            NETWORKS,
            characterize_network,
            is_mlperf_network,
        )

        if not is_mlperf_network(model) and model not in classification_models():
            raise UnknownModelError(model, [*classification_models(), *NETWORKS])
        self.notify(f"characterizing {model} at batch {batch} (torch, meta tensors)...")
        if is_mlperf_network(model):
            return characterize_network(model, batch, partition)
        return characterize_model(model, batch, partition=partition)

    def _load(self, path: Path, header: dict, kind: str):
        """The cached record (`kind` "workload" or "llm_step"), or None (a miss, or any problem
        with the entry: noted). `header` must match the entry's."""
        from chipcal.model.workload.serialize import llm_step_from_dict, workload_from_dict

        from_dict = workload_from_dict if kind == "workload" else llm_step_from_dict

        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.notify(f"note: cache entry {path.name} unreadable ({exc.strerror}); characterizing again")
            return None
        try:
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                    raise ValueError("not a regular file of yours")
                doc = json.loads(fh.read())
            if not isinstance(doc, dict) or doc.get("format") != FORMAT:
                raise ValueError(f"not a {FORMAT} file")
            if doc.get("key") != self.key or any(doc.get(k) != v for k, v in header.items()):
                raise ValueError("written for another model, batch or code version")
            if doc.get("sha256") != _digest(doc.get(kind)):
                raise ValueError("content hash does not match")
            return from_dict(doc[kind])
        except (OSError, ValueError, TypeError, RecursionError) as exc:
            self.notify(f"note: cache entry {path.name} unusable ({str(exc)[:80]}); characterizing again")
            return None

    def _store(self, path: Path, header: dict, kind: str, record) -> None:
        from chipcal.model.workload.serialize import llm_step_to_dict, workload_to_dict

        payload = (workload_to_dict if kind == "workload" else llm_step_to_dict)(record)
        doc = {"format": FORMAT, "key": self.key, **header, "sha256": _digest(payload), kind: payload}
        try:
            write_json_atomic(path, doc)
        except (OSError, ValueError) as exc:
            self.notify(f"warning: cannot cache the workload in {path.parent}: {exc}")
