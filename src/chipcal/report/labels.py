"""How a table names a chip: a hypothetical design (registry `hypothetical = true`) carries a mark,
and the legend of any table that shows one explains it."""

from __future__ import annotations

HYPOTHETICAL_MARK = "*"
HYPOTHETICAL_NOTE = f"{HYPOTHETICAL_MARK} = hypothetical: a design study, not a product"


def marked(name: str, hypothetical: bool) -> str:
    """A chip's name as a table shows it: HYPOTHETICAL_MARK after a hypothetical design's."""
    return name + HYPOTHETICAL_MARK if hypothetical else name
