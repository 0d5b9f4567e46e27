"""Plain-text tables for the admin commands (`hubd tokens list`, `hubd webhook list`), and the times they show."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime


def print_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Left-aligned columns, two spaces apart, header first."""
    table = [tuple(columns), *(tuple(r) for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(columns))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def utc_text(epoch: float | None) -> str:
    """`2026-11-22 08:00:00Z`, or `-` for never."""
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
