"""Price tables from TOML, validated strictly: every error names the file, the line and the fault.

tomllib gives no line numbers for values, so entries are located by their `[[price]]`
header lines in the text, and keys by their `key =` line inside that entry.

A price is at most MAX_PRICE_PER_MILLION, $1,000,000 per million tokens (over a thousand times
any real price): the ceiling the ledger's money columns are sized for (pricing/calculator.py).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from importlib.abc import Traversable
from importlib.resources import files
from pathlib import Path
from typing import Any

from pricing.calculator import MAX_DECIMALS, MAX_FEE_PER_1K, MAX_PRICE_PER_MILLION, MAX_TOKENS
from pricing.model import TOKEN_TYPES, Band, Price, is_glob
from pricing.toml_lines import key_line
from proxy.errors import LLMMeterError

REQUIRED = ("model", "tier", "effective_from", *TOKEN_TYPES, "source")
# Version 2 (SPEC "Price tables, version 2"): every addition is optional.
OPTIONAL = ("match", "upstream", "currency", "cache_write_1h", "web_search_per_1k", "inference_geo", "band")
BAND_PRICES = ("input", "output", "cache_read", "cache_write", "cache_write_1h")
BAND_KEYS = ("above_input_tokens", *BAND_PRICES)
# A band's threshold is on the input side, at most four categories of MAX_TOKENS each.
MAX_BAND_THRESHOLD = 4 * MAX_TOKENS
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_HEADER = re.compile(r"^\s*\[\[\s*price\s*\]\]")
_BAND_HEADER = re.compile(r"^\s*\[\[?\s*price\s*\.\s*band\s*\]\]?")  # [price.band] too, to point at it
_TOML_LINE = re.compile(r"at line (\d+)")


class PriceTableError(LLMMeterError, ValueError):
    """One or more price tables are broken; `errors` holds each "file:line: what" message."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


def default_tables_dir() -> Traversable:
    """The tables shipped inside the package, found wherever llmmeter is installed."""
    return files("pricing") / "tables"


def check_dir(directory: str | Path | Traversable) -> list[str]:
    """All errors in a directory of tables, across files (duplicates included); [] when valid."""
    return _load(directory)[1]


def load_dir(directory: str | Path | Traversable) -> list[Price]:
    prices, errors = _load(directory)
    if errors:
        raise PriceTableError(errors)
    return prices


def _load(directory: str | Path | Traversable) -> tuple[list[Price], list[str]]:
    if isinstance(directory, str):
        directory = Path(directory)
    if not directory.is_dir():
        return [], [f"{directory}: not a directory of price tables"]
    tables = sorted((t for t in directory.iterdir() if t.name.endswith(".toml")), key=lambda t: t.name)
    if not tables:
        return [], [f"{directory}: no price tables (*.toml)"]
    prices: list[Price] = []
    errors: list[str] = []
    for table in tables:
        found, bad = _read_table(table)
        prices += found
        errors += bad
    errors += _cross_checks(prices)
    return prices, errors


def _read_table(table: Path | Traversable) -> tuple[list[Price], list[str]]:
    """One file's entries and errors; a file that cannot be read or decoded is one error naming it."""
    name = str(table)
    if not table.is_file():
        return [], [f"{name}: not a file: a price table is a *.toml file"]
    try:
        data = table.read_bytes()
    except OSError as e:
        return [], [f"{name}: cannot read: {e.strerror or e}"]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        return [], [f"{name}:{line}: not UTF-8 text (byte {e.start} is {data[e.start]:#04x}): a price table is TOML"]
    return parse_table(text, name)


def parse_table(text: str, name: str) -> tuple[list[Price], list[str]]:
    """One file's entries and errors."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = _TOML_LINE.search(str(e))
        return [], [f"{name}:{m.group(1) if m else 1}: not valid TOML: {e}"]
    except RecursionError:  # tomllib recurses once per nested array or table
        return [], [f"{name}: arrays or tables nested too deeply to be a price table"]
    lines = text.splitlines()
    errors = [f"{name}:{_key_line(lines, 0, len(lines), k) or 1}: unknown top-level key {k!r} (only [[price]])"
              for k in doc if k != "price"]
    entries = doc.get("price", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        line = _key_line(lines, 0, len(lines), "price") or 1
        return [], [*errors, f"{name}:{line}: `price` must be an array of tables: write [[price]]"]
    headers = [i for i, line in enumerate(lines) if _HEADER.match(line)]
    prices = []
    for n, entry in enumerate(entries):
        first = headers[n] if n < len(headers) else 0
        last = headers[n + 1] if n + 1 < len(headers) else len(lines)
        price, bad = _entry(entry, name, lines, first, last)
        errors += bad
        if price is not None:
            prices.append(price)
    return prices, errors


def _entry(entry: dict[str, Any], name: str, lines: list[str], first: int, last: int
           ) -> tuple[Price | None, list[str]]:
    # The entry's own keys sit before its first [[price.band]] header; each band's after its own.
    band_headers = [i for i in range(first + 1, min(last, len(lines))) if _BAND_HEADER.match(lines[i])]
    own_last = band_headers[0] if band_headers else last

    def at(key: str | None = None) -> str:
        line = _key_line(lines, first, own_last, key) if key else None
        return f"{name}:{line or first + 1}"

    errors = [f"{at(k)}: unknown key {k!r} in [[price]] (known: {', '.join(REQUIRED + OPTIONAL)})"
              for k in entry if k not in REQUIRED + OPTIONAL]
    errors += [f"{at()}: [[price]] is missing {k!r}" for k in REQUIRED if k not in entry]
    if errors:
        return None, errors

    def text(key: str) -> str:
        v = entry[key]
        if not isinstance(v, str) or not v.strip():
            errors.append(f"{at(key)}: {key} must be a non-empty string")
            return ""
        return v.strip()

    model, tier, source = text("model"), text("tier"), text("source")
    if tier and not _NAME.match(tier):
        errors.append(f"{at('tier')}: tier {tier!r} must be lower-case letters, digits, '_', '-' or '.'")
    currency = entry.get("currency", "USD")
    if currency != "USD":
        errors.append(f"{at('currency')}: currency {currency!r} is not supported: price tables are in USD")
    upstream = text("upstream") if "upstream" in entry else None
    geo = text("inference_geo") if "inference_geo" in entry else None
    if geo and not _NAME.match(geo):
        errors.append(f"{at('inference_geo')}: inference_geo {geo!r} must be lower-case letters, digits, '_', "
                      f"'-' or '.' (as the provider reports it, e.g. \"us\")")
    match: tuple[str, ...] = ()
    if "match" in entry:
        raw = entry["match"]
        if not isinstance(raw, list) or not raw or not all(isinstance(m, str) and m.strip() for m in raw):
            errors.append(f"{at('match')}: match must be a non-empty list of model names")
        else:
            match = tuple(m.strip() for m in raw)
    effective = _effective(entry["effective_from"], at("effective_from"), errors)
    amounts = {k: _amount(entry[k], k, at(k), errors) for k in TOKEN_TYPES}
    write_1h = _amount(entry["cache_write_1h"], "cache_write_1h", at("cache_write_1h"), errors) \
        if "cache_write_1h" in entry else None
    fee = _amount(entry["web_search_per_1k"], "web_search_per_1k", at("web_search_per_1k"), errors,
                  ceiling=MAX_FEE_PER_1K, per="1,000 calls") if "web_search_per_1k" in entry else None
    band_at = f"{name}:{band_headers[0] + 1}" if band_headers else at("band")
    bands = _bands(entry["band"], name, lines, band_at, band_headers, last, errors) if "band" in entry else ()
    if errors or effective is None:
        return None, errors
    return Price(model=model, tier=tier, effective_from=effective, source=source, match=match,
                 upstream=upstream, file=name, line=first + 1,
                 input=amounts["input"], output=amounts["output"],
                 cache_read=amounts["cache_read"], cache_write=amounts["cache_write"],
                 cache_write_1h=write_1h, web_search_per_1k=fee, bands=bands, inference_geo=geo), []


def _bands(raw: object, name: str, lines: list[str], where: str, headers: list[int], last: int,
           errors: list[str]) -> tuple[Band, ...]:
    """An entry's [[price.band]] tables: each with its own file:line, ascending, known keys only."""
    if not isinstance(raw, list) or not raw or not all(isinstance(b, dict) for b in raw):
        errors.append(f"{where}: band must be an array of tables: write [[price.band]] after the [[price]] "
                      f"entry's own keys")
        return ()
    if len(headers) != len(raw):  # an inline array: no header lines to point at, the key's line it is
        headers = []
    bands: list[Band] = []
    previous: Band | None = None
    for n, band in enumerate(raw):
        first = headers[n] if headers else -1
        end = headers[n + 1] if n + 1 < len(headers) else last

        def at(key: str | None = None, first: int = first, end: int = end) -> str:
            if first < 0:
                return where
            line = _key_line(lines, first, end, key) if key else None
            return f"{name}:{line or first + 1}"

        before = len(errors)
        errors += [f"{at(k)}: unknown key {k!r} in [[price.band]] (known: {', '.join(BAND_KEYS)})"
                   for k in band if k not in BAND_KEYS]
        if "above_input_tokens" not in band:
            errors.append(f"{at()}: [[price.band]] is missing 'above_input_tokens'")
            continue
        above = band["above_input_tokens"]
        if type(above) is not int or not 0 < above <= MAX_BAND_THRESHOLD:
            errors.append(f"{at('above_input_tokens')}: above_input_tokens must be a whole number of tokens "
                          f"from 1 to {MAX_BAND_THRESHOLD:,}, not {above!r}")
            continue
        if not any(k in band for k in BAND_PRICES):
            errors.append(f"{at()}: [[price.band]] above {above} gives no price ({', '.join(BAND_PRICES)}): "
                          f"it would change nothing")
        prices = {k: _amount(band[k], k, at(k), errors) for k in BAND_PRICES if k in band}
        if previous is not None and above <= previous.above_input_tokens:
            errors.append(f"{at('above_input_tokens')}: bands must be strictly ascending: above_input_tokens "
                          f"{above} follows {previous.above_input_tokens} (at {name}:{previous.line})")
        if len(errors) > before:
            continue
        previous = Band(above_input_tokens=above, line=first + 1 if first >= 0 else 0, **prices)
        bands.append(previous)
    return tuple(bands)


def _effective(v: object, where: str, errors: list[str]) -> datetime | None:
    if isinstance(v, datetime):
        if v.tzinfo is None:
            errors.append(f"{where}: effective_from {v.isoformat()} has no UTC offset (write e.g. "
                          f"{v.isoformat()}Z)")
            return None
        try:
            return v.astimezone(UTC)
        except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 is before the first representable time
            errors.append(f"{where}: effective_from {v.isoformat()} is out of range")
            return None
    if isinstance(v, date):
        errors.append(f"{where}: effective_from must be a time with offset, e.g. {v.isoformat()}T00:00:00Z")
    else:
        errors.append(f"{where}: effective_from must be a TOML datetime like 2026-10-23T00:00:00Z, not {v!r}")
    return None


def _amount(v: object, key: str, where: str, errors: list[str], ceiling: Decimal = MAX_PRICE_PER_MILLION,
            per: str = "million tokens") -> Decimal:
    if not isinstance(v, str):
        # A TOML float is binary: 0.1 is not 0.1. Prices must be exact, so they are strings.
        errors.append(f'{where}: {key} must be a decimal string such as "2.00", not {type(v).__name__} {v!r}')
        return Decimal(0)
    try:
        d = Decimal(v.strip())
    except InvalidOperation:
        errors.append(f"{where}: {key} {v!r} is not a decimal number")
        return Decimal(0)
    if not d.is_finite():
        errors.append(f"{where}: {key} {v!r} is not a finite number")
    elif d < 0:
        errors.append(f"{where}: {key} {v!r} is negative")
    elif d > ceiling:
        errors.append(f"{where}: {key} {v!r} is above the ceiling of {ceiling:,} USD per {per}")
    elif -d.as_tuple().exponent > MAX_DECIMALS:  # type: ignore[operator]
        errors.append(f"{where}: {key} {v!r} has more than {MAX_DECIMALS} decimal places")
    elif d.as_tuple().exponent > 0:  # type: ignore[operator]
        d = Decimal(int(d))  # "1E+3" or "0E+999999": the same price with an ordinary exponent
    return d


def _cross_checks(prices: Iterable[Price]) -> list[str]:
    errors: list[str] = []
    seen: dict[tuple[str, str, str | None, str | None, datetime], Price] = {}
    owner: dict[str, Price] = {}
    for p in prices:
        key = (p.model, p.tier, p.upstream, p.inference_geo, p.effective_from)
        if key in seen:
            errors.append(f"{p.where}: duplicate entry for model {p.model!r} tier {p.tier!r}"
                          f"{f' upstream {p.upstream!r}' if p.upstream else ''}"
                          f"{f' inference_geo {p.inference_geo!r}' if p.inference_geo else ''} effective "
                          f"{p.effective_from.isoformat()} (first at {seen[key].where})")
        else:
            seen[key] = p
        for name in (p.model, *p.match):
            other = owner.setdefault(name.lower(), p)
            if other.model != p.model:
                what = "glob" if is_glob(name) else "model name"
                errors.append(f"{p.where}: {what} {name!r} already means {other.model!r} "
                              f"(at {other.where}); a name can mean one model only")
    return errors


def _key_line(lines: list[str], first: int, last: int, key: str | None) -> int | None:
    return None if key is None else key_line(lines, first, last, key)
