"""The corpus compared split by split: the rows `chipcal validate --split` shows with their
summary, and for the markdown document each split (`fit`, `test`) with its own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chipcal.model.registry import Registry
from chipcal.validate.corpus import (
    SPLITS,
    Comparison,
    CorpusError,
    Measurement,
    Summary,
    compare,
    select,
    summarize,
)


class EmptySplit(CorpusError):
    """The split asked for has no row in the corpus."""


@dataclass(frozen=True)
class SplitComparison:
    """Corpus rows next to their predictions, and the summary of their errors."""

    comparisons: tuple[Comparison, ...]
    summary: Summary


def _of(comparisons: Sequence[Comparison]) -> SplitComparison:
    return SplitComparison(tuple(comparisons), summarize(comparisons))


def compare_splits(rows: Sequence[Measurement], split: str, workload: Callable[[str, int, str], object],
                   registry: Registry, every_split: bool = False) -> tuple[SplitComparison, dict[str, SplitComparison]]:
    """The rows of `split` ('all': every row) compared and summarized; with `every_split`, every
    row is compared and each of SPLITS comes back apart too (else {}). EmptySplit when `split`
    has no row."""
    chosen = select(rows, split)
    if not chosen:
        raise EmptySplit(f"the corpus has no rows in split {split!r}")
    everything = compare(rows if every_split else chosen, workload, registry)
    shown = _of([c for c in everything if split == "all" or c.split == split])
    by_split = {s: _of([c for c in everything if c.split == s]) for s in SPLITS} if every_split else {}
    return shown, by_split
