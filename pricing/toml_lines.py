"""Where a value sits in a TOML text: tomllib gives no line numbers, so errors find the
`[table]` / `[[table]]` header and the `key =` line themselves. Shared by the price tables
and llmmeter's own config."""

from __future__ import annotations

import re
from collections.abc import Sequence


def header_lines(lines: Sequence[str], table: str) -> list[int]:
    """0-based indexes of the `[table]` or `[[table]]` header lines, in order."""
    header = re.compile(rf"^\s*\[\[?\s*{re.escape(table)}\s*\]\]?\s*(#.*)?$")
    return [i for i, text in enumerate(lines) if header.match(text)]


def key_line(lines: Sequence[str], first: int, last: int, key: str, *, stop_at_table: bool = False) -> int | None:
    """The 1-based line of `key = ...` in lines[first:last] (quoted keys too), or None; with
    `stop_at_table`, the search ends at the next table header after `first`."""
    pattern = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
    for i in range(first, min(last, len(lines))):
        if stop_at_table and i > first and lines[i].lstrip().startswith("["):
            return None
        if pattern.match(lines[i]):
            return i + 1
    return None
