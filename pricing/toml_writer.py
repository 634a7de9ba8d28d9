"""Price entries as TOML text the loader reads back to the same entries (pricing/loader.py).

Deterministic: the same entries always give the same bytes, so writing a table twice changes
nothing. Prices are written as decimal strings in plain notation, never floats."""

from __future__ import annotations

import json
from collections.abc import Iterable
from decimal import Decimal

from pricing.model import Band, Price


def price_text(v: Decimal) -> str:
    """A price as the loader wants it: plain notation (never 1E-7), as many places as it has."""
    return format(v, "f")


def _string(s: str) -> str:
    # A TOML basic string is a JSON string minus a few escapes JSON never writes for printable text.
    return json.dumps(s, ensure_ascii=False)


def entry_text(p: Price) -> str:
    lines = ["[[price]]", f"model = {_string(p.model)}"]
    if p.match:
        lines.append(f"match = [{', '.join(_string(m) for m in p.match)}]")
    lines.append(f"tier = {_string(p.tier)}")
    if p.upstream is not None:
        lines.append(f"upstream = {_string(p.upstream)}")
    if p.inference_geo is not None:
        lines.append(f"inference_geo = {_string(p.inference_geo)}")
    lines.append(f"effective_from = {p.effective_from.strftime('%Y-%m-%dT%H:%M:%SZ')}")
    for key in ("input", "output", "cache_read", "cache_write", "cache_write_1h", "web_search_per_1k"):
        value = getattr(p, key)
        if value is not None:
            lines.append(f'{key} = "{price_text(value)}"')
    lines.append(f"source = {_string(p.source)}")
    lines += [line for band in p.bands for line in ("", *_band_lines(band))]
    return "\n".join(lines) + "\n"


def _band_lines(b: Band) -> list[str]:
    lines = ["[[price.band]]", f"above_input_tokens = {b.above_input_tokens}"]
    for key in ("input", "output", "cache_read", "cache_write", "cache_write_1h"):
        value = getattr(b, key)
        if value is not None:
            lines.append(f'{key} = "{price_text(value)}"')
    return lines


def table_text(header: Iterable[str], entries: Iterable[Price]) -> str:
    """A whole table: comment lines, then the entries, one blank line apart."""
    head = "".join(f"# {line}".rstrip() + "\n" for line in header)
    return head + "".join("\n" + entry_text(p) for p in entries)
