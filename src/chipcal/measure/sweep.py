"""What every probe sweep reports beside its points: where it ran, whether it came from the
measurement cache, what went wrong, and how busy the machine was while it ran."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Sweep:
    device: str
    fingerprint_slug: str
    from_cache: bool = False
    warnings: tuple[str, ...] = ()
    other_cpus: float | None = None     # most CPUs other work used during the sweep (OtherLoad)

    def envelope_dict(self) -> dict:
        """The envelope as plain data, for a probe's `to_dict` (from_cache is not stored: a
        result read back is from the cache by definition)."""
        return {"device": str(self.device), "fingerprint_slug": self.fingerprint_slug,
                "warnings": list(self.warnings), "other_cpus": self.other_cpus}
