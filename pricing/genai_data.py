"""genai-prices' shipped data as llmmeter price entries (SPEC "Price tables, version 2" → Price data).

Only the package's shipped data module is read; its network price updater is never called.

Conversion, per provider and model: dated prices (`ConditionalPrice` with a start date) become
entries at 00:00Z of that date, the first one effective from 2000-01-01; request variants become
tiers; `TieredPrices` become bands; a token category the model lacks takes its input price.
Whatever the price model cannot hold is returned as `Skipped`, never dropped silently.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pricing.calculator import MAX_DECIMALS, MAX_FEE_PER_1K, MAX_PRICE_PER_MILLION
from pricing.model import Band, Price
from proxy.errors import ConfigError

PACKAGE = "genai-prices"
PINNED = "0.2.5"  # pyproject.toml's `prices` extra; docs/prices.md says how to move it
FIRST_EFFECTIVE = datetime(2000, 1, 1, tzinfo=UTC)
# genai-prices price keys → llmmeter's: USD per million tokens, and the web search fee per 1,000 calls.
TOKEN_KEYS = {"input_mtok": "input", "output_mtok": "output", "cache_read_mtok": "cache_read",
              "cache_write_mtok": "cache_write", "cache_write_1h_mtok": "cache_write_1h"}
FEE_KEYS = {"web_searches_kcount": "web_search_per_1k"}
_EXPONENT = Decimal(1).scaleb(-MAX_DECIMALS)


@dataclass(frozen=True, slots=True)
class Skipped:
    """Something genai-prices prices that the import leaves out, and why."""

    provider: str
    model: str
    what: str

    def __str__(self) -> str:
        return f"{self.provider}: {self.model}: {self.what}"


@dataclass(frozen=True, slots=True)
class ProviderTable:
    """One provider's entries as llmmeter would write them, and what it could not hold."""

    id: str
    name: str
    entries: tuple[Price, ...]
    skipped: tuple[Skipped, ...]


@dataclass(frozen=True, slots=True)
class Data:
    version: str
    providers: tuple[Any, ...]  # genai_prices.types.Provider
    types: Any  # the genai_prices.types module


def load() -> Data:
    """The installed genai-prices' shipped data, without its network updater."""
    try:
        installed = version(PACKAGE)
    except PackageNotFoundError:
        raise ConfigError(f"{PACKAGE} is not installed: pip install 'llmmeter[prices]' "
                          f"(it pins {PACKAGE}=={PINNED})") from None
    # Importing the package starts nothing: its price updater (UpdatePrices) runs only when a
    # program calls it, and llmmeter never does. Only the shipped `data` module is read.
    data, kinds = importlib.import_module("genai_prices.data"), importlib.import_module("genai_prices.types")
    return Data(version=installed, providers=tuple(data.providers), types=kinds)


def convert(data: Data, provider: Any, models: Iterable[str] = ()) -> ProviderTable:
    """One provider's models (those whose id matches a `models` glob, if any) as price entries."""
    from fnmatch import fnmatch

    globs = [g.lower() for g in models]
    entries: list[Price] = []
    skipped: list[Skipped] = []
    claimed: dict[str, str] = {}  # lower-cased name or glob -> model id (the first model claims it)
    for m in provider.models:
        if globs and not any(fnmatch(m.id.lower(), g) for g in globs):
            continue
        found, bad = _model(data, provider, m, claimed)
        entries += found
        skipped += [Skipped(provider.id, m.id, what) for what in bad]
    return ProviderTable(provider.id, provider.name, tuple(entries), tuple(skipped))


def _model(data: Data, provider: Any, m: Any, claimed: dict[str, str]) -> tuple[list[Price], list[str]]:
    t = data.types
    notes: list[str] = []
    names = _names(m.match, t, notes)
    mine = []
    for name in names:
        owner = claimed.setdefault(name.lower(), m.id)
        if owner == m.id:
            mine.append(name)
        else:
            notes.append(f"name {name!r} left to {owner!r}, which claims it first")
    claimed.setdefault(m.id.lower(), m.id)
    match = tuple(n for n in dict.fromkeys([m.id, *mine]))
    source = f"{PACKAGE} {data.version} (pydantic's price data, https://github.com/pydantic/genai-prices): " \
             f"provider {provider.id}, model {m.id}"
    cannot = cannot_hold(m, t)
    if cannot is not None:
        return [], [*notes, cannot]
    tiers = _tier_timelines(m, t, notes)
    entries: list[Price] = []
    unknown: set[str] = set()
    for tier, timeline in tiers.items():
        previous: Price | None = None
        for when, prices in timeline:
            entry = _entry(m.id, tier, when, prices, t, notes, unknown)
            if entry is None:
                continue
            entry = replace(entry, source=source, match=match if tier == "standard" and not entries else ())
            if previous is not None and same_prices(previous, entry):
                continue
            entries.append(entry)
            previous = entry
    if unknown:
        notes.append(f"prices by other units cannot be held by a price entry: {', '.join(sorted(unknown))}")
    if not entries and not notes:
        notes.append("no price the import can use")
    return entries, list(dict.fromkeys(notes))


def cannot_hold(m: Any, t: Any) -> str | None:
    """Why an entry cannot price the model as genai-prices does, or None: a price on every request,
    or on tokens llmmeter bills inside input or output (reasoning, citations, audio, images, video)
    at a rate of their own — written, it would underprice them. (A model without an output price,
    such as an embedding model, is written: its output takes the input price, as SPEC says.)"""
    prices = [m.prices] if isinstance(m.prices, t.ModelPrice) else [c.prices for c in m.prices]
    every = prices + [v.prices for v in m.price_variants or ()]
    keys = {k for p in every for k in _keys(p)}
    parts = []
    if "requests_kcount" in keys:
        fee = next(_base(_keys(p)["requests_kcount"]) for p in every if "requests_kcount" in _keys(p))
        parts.append(f"a per-request fee (${fee} per 1,000 requests)")
    rates = sorted(k for k in keys if k.endswith("_mtok") and k not in TOKEN_KEYS)
    if rates:
        parts.append(f"token rates of their own ({', '.join(rates)})")
    if parts:
        return f"its price has parts an entry cannot hold: {' and '.join(parts)}; left out rather than " \
               f"written underpriced"
    return None


def _tier_timelines(m: Any, t: Any, notes: list[str]) -> dict[str, list[tuple[datetime, dict[str, Any]]]]:
    """Per tier, (effective_from, price keys) in date order: the standard tier from the model's
    dated prices, every other tier from the request variants laid over them."""
    conditional = [m.prices] if isinstance(m.prices, t.ModelPrice) else None
    steps: list[tuple[date | None, Any]] = []
    if conditional is None:
        hours = [c for c in m.prices if isinstance(c.constraint, t.TimeOfDateConstraint)]
        if hours:  # any one price would be wrong for part of every day: unpriced traffic is at least alarmed
            spans = "; ".join(f"{c.constraint.start_time:%H:%M}-{c.constraint.end_time:%H:%M} UTC {_plain(c.prices)}"
                              for c in hours)
            notes.append(f"time-of-day prices ({spans}) cannot be held: the model is left out rather than "
                         f"priced wrong for part of the day")
            return {}
        for c in m.prices:
            steps.append((c.constraint.start_date if c.constraint is not None else None, c.prices))
    else:
        steps.append((None, m.prices))
    dates = sorted({FIRST_EFFECTIVE.date(), *(d for d, _ in steps if d is not None)})

    def base_at(day: date) -> dict[str, Any] | None:
        # genai-prices: the last price whose constraint holds wins; none holding, the first.
        active = [p for d, p in steps if d is None or d <= day]
        chosen = active[-1] if active else (steps[0][1] if steps else None)
        return None if chosen is None else _keys(chosen)

    timelines: dict[str, list[tuple[datetime, dict[str, Any]]]] = {}
    standard = [(_midnight(d), p) for d in dates if (p := base_at(d)) is not None]
    if standard:
        timelines["standard"] = standard
    variants: dict[str, list[Any]] = {}
    for v in m.price_variants or ():
        tier = tier_of(v.when)
        if tier is None:
            notes.append(f"price variant {v.when} is no tier llmmeter can tell apart ({_plain(v.prices)})")
        elif isinstance(v.constraint, t.TimeOfDateConstraint):
            notes.append(f"time-of-day variant {v.when} cannot be held: entries are by date")
        elif tier != "standard" or _keys(v.prices):
            variants.setdefault(tier, []).append(v)
    for tier, vs in variants.items():
        starts = [v.constraint.start_date for v in vs if v.constraint is not None]
        # genai-prices applies a dated variant from its start date only (before it, the tier's
        # requests cost the standard price, which is what llmmeter charges a tier with no entry
        # yet); a variant without a date applies from the first entry on.
        first = min(starts) if len(starts) == len(vs) else FIRST_EFFECTIVE.date()
        days = sorted({first, *(d for d in dates if d > first), *starts})
        line = []
        for day in days:
            base = base_at(day)
            if base is None:
                continue
            over: dict[str, Any] = {}
            for v in vs:  # the first variant in force wins, per price key (genai-prices' own order)
                if v.constraint is None or v.constraint.start_date <= day:
                    for k, value in _keys(v.prices).items():
                        over.setdefault(k, value)
            line.append((_midnight(day), {**base, **over}))
        timelines[tier] = line
    return timelines


def tier_of(when: dict[str, str]) -> str | None:
    if len(when) != 1:
        return None
    (key, value), = when.items()
    if key == "processing" and value == "batch":
        return "batch"
    if key == "speed" and value == "fast":
        return "fast"
    if key == "service_tier" and re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", value):
        return "standard" if value == "default" else value
    return None


def _keys(prices: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(prices).items() if not k.startswith("_") and v is not None}


def _plain(prices: Any) -> str:
    return ", ".join(f"{k} {_base(v)}" for k, v in _keys(prices).items())


def _base(v: Any) -> Any:
    return getattr(v, "base", v)


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _entry(model: str, tier: str, when: datetime, keys: dict[str, Any], t: Any, notes: list[str],
           unknown: set[str]) -> Price | None:
    unknown.update(k for k in keys if k not in TOKEN_KEYS and k not in FEE_KEYS)
    if "input_mtok" not in keys:
        notes.append("no input token price: nothing to price tokens at")
        return None
    thresholds = sorted({tier_.start for k in TOKEN_KEYS if isinstance(keys.get(k), t.TieredPrices)
                         for tier_ in keys[k].tiers})

    def at(key: str, above: int | None) -> Decimal | None:
        v = keys.get(key)
        if v is None:
            return None
        if not isinstance(v, t.TieredPrices):
            return _exact(v, key, model, tier, notes)
        price = v.base
        for step in v.tiers:  # the highest tier that starts at or below the band's threshold
            if above is not None and step.start <= above:
                price = step.price
        return _exact(price, key, model, tier, notes)

    def prices(above: int | None) -> dict[str, Decimal]:
        got = {name: p for key, name in TOKEN_KEYS.items() if (p := at(key, above)) is not None}
        for name in ("output", "cache_read", "cache_write"):
            got.setdefault(name, got["input"])  # a category it lacks takes the input price, never 0
        return got

    if 0 in thresholds:  # a tier from the first token on: only a request with no input at all misses it
        notes.append("a price tier starting at 0 input tokens is taken as the base price")
        keys = {k: (_fold_zero(v, t) if isinstance(v, t.TieredPrices) else v) for k, v in keys.items()}
        thresholds.remove(0)
    base = prices(None)
    bands = tuple(_band(n, prices(n)) for n in thresholds)
    fee = keys.get("web_searches_kcount")
    fee_price = _exact(fee, "web_searches_kcount", model, tier, notes, MAX_FEE_PER_1K) if fee is not None else None
    if any(v > MAX_PRICE_PER_MILLION for v in base.values()):
        notes.append(f"{tier} price above the ceiling of {MAX_PRICE_PER_MILLION:,} USD per million tokens")
        return None
    return Price(model=model, tier=tier, effective_from=when, source="", input=base["input"],
                 output=base["output"], cache_read=base["cache_read"], cache_write=base["cache_write"],
                 cache_write_1h=base.get("cache_write_1h"), web_search_per_1k=fee_price, bands=bands)


def _band(above: int, prices: dict[str, Decimal]) -> Band:
    return Band(above_input_tokens=above, input=prices["input"], output=prices["output"],
                cache_read=prices["cache_read"], cache_write=prices["cache_write"],
                cache_write_1h=prices.get("cache_write_1h"))


def _fold_zero(v: Any, t: Any) -> Any:
    zero = [s for s in v.tiers if s.start == 0]
    return t.TieredPrices(base=zero[-1].price, tiers=[s for s in v.tiers if s.start != 0]) if zero else v


def _exact(v: Decimal, key: str, model: str, tier: str, notes: list[str],
           ceiling: Decimal = MAX_PRICE_PER_MILLION) -> Decimal:
    """At most MAX_DECIMALS places, as the loader wants: more (a float's tail in the data, e.g.
    0.18000000000000002) is rounded half-even and listed."""
    d = Decimal(v)
    if d.as_tuple().exponent < -MAX_DECIMALS:  # type: ignore[operator]
        rounded = d.quantize(_EXPONENT, rounding=ROUND_HALF_EVEN).normalize()
        notes.append(f"{tier} {key} {d} has more than {MAX_DECIMALS} decimal places: rounded half-even to "
                     f"{format(rounded, 'f')}")
        d = rounded
    if d > ceiling:
        return d
    return _plain_decimal(d)


def _plain_decimal(d: Decimal) -> Decimal:
    """No exponent: 1E+1 is 10, and trailing zeros kept as the data gives them."""
    return Decimal(int(d)) if d.as_tuple().exponent > 0 else d  # type: ignore[operator]


def same_prices(a: Price, b: Price) -> bool:
    """Whether two entries price every request the same (dates, names and sources aside)."""
    return (a.input, a.output, a.cache_read, a.cache_write, a.cache_write_1h, a.web_search_per_1k, a.bands) == \
        (b.input, b.output, b.cache_read, b.cache_write, b.cache_write_1h, b.web_search_per_1k, b.bands)


# ---- match logic → names and globs -------------------------------------------------------------

def _names(clause: Any, t: Any, notes: list[str]) -> list[str]:
    """The exact names and fnmatch globs a match clause means; a clause no glob can say is listed."""
    if isinstance(clause, t.ClauseOr):
        return [n for c in clause.or_ for n in _names(c, t, notes)]
    if isinstance(clause, t.ClauseEquals):
        return [_literal(clause.equals)]
    if isinstance(clause, t.ClauseStartsWith):
        return [_literal(clause.starts_with) + "*"]
    if isinstance(clause, t.ClauseEndsWith):
        return ["*" + _literal(clause.ends_with)]
    if isinstance(clause, t.ClauseContains):
        return ["*" + _literal(clause.contains) + "*"]
    if isinstance(clause, t.ClauseRegex):
        glob = regex_to_glob(clause.regex)
        if glob is None:
            notes.append(f"model names matching regex {clause.regex!r} (no glob says it): only the other names")
            return []
        return [glob]
    notes.append(f"model names matching {clause!r} (no glob says it): only the other names")
    return []


def _literal(text: str) -> str:
    """A name as an fnmatch pattern that matches it only: `*`, `?`, `[` bracketed."""
    return re.sub(r"([*?\[])", r"[\1]", text)


_REGEX_TOKEN = re.compile(r"\\d\{(\d+)\}|\\d|\[0-9\]\{(\d+)\}|\[0-9\]|\.\*|\.|\\(.)|(\[[A-Za-z0-9@_.:/-]+\])"
                          r"|([^\\.*+?()|{}\[\]^$])")


def regex_to_glob(regex: str) -> str | None:
    """A regex of literals, `\\d`, `\\d{n}`, `[0-9]`, `.` and `.*`, anchored or not, as a glob; None
    for anything else (alternation, groups, `+`, `?` quantifiers)."""
    body = regex
    start = body.startswith("^")
    end = body.endswith("$") and not body.endswith("\\$")
    body = body[1 if start else 0: len(body) - 1 if end else len(body)]
    out: list[str] = []
    pos = 0
    while pos < len(body):
        m = _REGEX_TOKEN.match(body, pos)
        if m is None:
            return None
        token = m.group(0)
        if token.startswith("\\d{") or token.startswith("[0-9]{"):
            out.append("[0-9]" * int(m.group(1) or m.group(2)))
        elif token in ("\\d", "[0-9]"):
            out.append("[0-9]")
        elif token == ".*":
            out.append("*")
        elif token == ".":
            out.append("?")
        elif m.group(4) is not None:  # a class of plain characters means the same in a glob
            out.append(m.group(4))
        elif m.group(3) is not None:
            if m.group(3).isalnum():  # \w, \s, \b ...: a class, not a literal
                return None
            out.append(_literal(m.group(3)))
        else:
            out.append(_literal(token))
        pos = m.end()
    glob = ("" if start else "*") + "".join(out) + ("" if end else "*")
    return glob.replace("**", "*")
