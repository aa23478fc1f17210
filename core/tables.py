"""Plain-text rendering of tables and key/value lists, shared by the doctor's report and the CLI."""

from __future__ import annotations

from typing import Any, Iterable, Sequence


def render_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Return rows as a plain-text table with aligned columns."""
    body = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in body)
    return "\n".join(lines)


def render_mapping(data: dict[str, Any]) -> str:
    """Return a flat mapping as `key: value` lines."""
    width = max((len(k) for k in data), default=0)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in data.items())
