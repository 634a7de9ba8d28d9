"""Imported prices against genai-prices' own calculator (SPEC "Price tables, version 2" → Price data).

`verify` prices sample requests twice — with llmmeter's tables (PriceBook + price_tokens, as a
request is priced) and with genai-prices' `ModelInfo.calc_price` for the model and provider an
entry was imported from — and lists every disagreement above 10^-10 USD. The samples cover every
date either side's prices change (that midnight and the second before it), both sides of every
band edge (N and N + 1 input-side tokens), each token category alone (input, cache reads, 5-minute
and 1-hour cache writes, output, reasoning and citation output, web searches), and each tier with
every request context genai-prices maps to it. Names are checked by model id: a name that is
another model's id, or that genai-prices' provider prices as another model, must not reach an
imported model. The importer writes only what passes; `prices diff` and the tests call it too.

A category genai-prices has no price for is billed 0 by its calculator, where SPEC has the import
give it the input price, never 0. Where a resolved genai-prices price lacks a category its
calculator would bill at 0 (output: embedding models have only an input price), that category is
not compared with genai-prices: it is checked to be the input price (genai-prices' calculator run
on its own price with the input price in that category's place), and the result names it as
`Filled`. Cache reads and writes it lacks need no such step: its calculator bills them as input.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from pricing.book import STANDARD, PriceBook
from pricing.calculator import MAX_TOKENS, Tokens, price_tokens, usd
from pricing.genai_data import FIRST_EFFECTIVE, PACKAGE, TOKEN_KEYS, Data, tier_of
from pricing.model import Price, is_glob

TOLERANCE = Decimal("1e-10")  # USD: one unit of the ledger
_PROVIDER_IN_SOURCE = re.compile(rf"^{re.escape(PACKAGE)} \S+ .*?provider (\S+), model ")
_BASE_SIZE = 98_765  # input-side tokens of a request below every band edge genai-prices has
_OUTPUT = 43_210
_SEARCHES = 3


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One model (and tier) whose imported prices disagree with genai-prices', and the first sample."""

    provider: str
    model: str
    tier: str  # "names" for a name priced as another model
    what: str
    name: str | None = None  # the name, for a name check
    glob: str | None = None  # the match item of the model that reached it

    def __str__(self) -> str:
        return f"{self.provider}: {self.model} {self.tier}: {self.what}"


@dataclass(frozen=True, slots=True)
class Filled:
    """An imported model with categories genai-prices has no price for: filled with the input price
    (SPEC: never 0) and checked to be it, not compared with genai-prices' calculator (which bills 0)."""

    provider: str
    model: str
    categories: tuple[str, ...]

    def __str__(self) -> str:
        return (f"{self.provider}: {self.model}: {' and '.join(self.categories)} filled with the input price "
                f"({PACKAGE} has none; its calculator bills {'them' if len(self.categories) > 1 else 'it'} at 0): "
                f"not compared with {PACKAGE}")


@dataclass(frozen=True, slots=True)
class Verification:
    """What `verify` found: the disagreements (none: every entry agrees), and the categories
    filled with the input price that were not compared with genai-prices."""

    mismatches: list[Mismatch]
    filled: list[Filled]


def imported_from(p: Price) -> str | None:
    """The genai-prices provider an entry was imported from; None for an entry written by hand."""
    m = _PROVIDER_IN_SOURCE.match(p.source)
    return m.group(1) if m else None


def verify(data: Data, prices: Sequence[Price], *, only: Iterable[str] | None = None,
           instants: Iterable[datetime] = (), since: datetime = FIRST_EFFECTIVE) -> Verification:
    """Every imported model (of `only`, if given) whose entries price a sample request otherwise
    than genai-prices does, and every name that reaches an imported model genai-prices does not
    price it as. `instants` are extra times to check beside the dates prices change; nothing
    before `since` is checked (an import appending to published histories checks from its date)."""
    book = PriceBook(prices)
    models = {(m.id, pid): (m, prov) for prov in data.providers for m in prov.models
              for pid in (prov.id,)}
    wanted = set(only) if only is not None else None
    out: list[Mismatch] = []
    filled: dict[tuple[str, str], set[str]] = {}
    histories: dict[tuple[str, str, str | None], list[Price]] = {}
    for p in book.prices:
        pid = imported_from(p)
        if pid is not None and p.inference_geo is None and (wanted is None or p.model in wanted):
            histories.setdefault((pid, p.model, p.upstream), []).append(p)
    for (pid, model, upstream), entries in sorted(histories.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        found = models.get((model, pid))
        if found is None:
            out.append(Mismatch(pid, model, "-", f"{PACKAGE} {data.version} has no model {model!r} in provider "
                                                 f"{pid}"))
            continue
        memo = Theirs()
        bad = check_prices(data, book, found[0], found[1], entries, upstream, [*instants, since], since, memo)
        if bad is not None:
            out.append(bad)
        if memo.filled:
            filled.setdefault((pid, model), set()).update(memo.filled)
    out += check_names(data, book, wanted)
    order = [k for k in TOKEN_KEYS.values()]
    return Verification(out, [Filled(pid, model, tuple(sorted(cats, key=order.index)))
                              for (pid, model), cats in sorted(filled.items())])


# ---- prices ---------------------------------------------------------------------------------------

def check_prices(data: Data, book: PriceBook, m: Any, provider: Any, entries: list[Price], upstream: str | None,
                 instants: Iterable[datetime], since: datetime = FIRST_EFFECTIVE, memo: Theirs | None = None
                 ) -> Mismatch | None:
    """The first sample, over every tier, date, band edge and category, priced differently; the
    categories filled with the input price are added to `memo.filled`."""
    t = data.types
    contexts = tier_contexts(m)
    for tier in sorted({p.tier for p in entries} - contexts.keys()):
        contexts[tier] = [{"processing": "batch"} if tier == "batch" else {"service_tier": tier}]
    times = [x for x in _instants(m, t, entries, instants) if x >= since]
    memo = Theirs() if memo is None else memo
    sizes = _sizes(m, t, entries)
    for tier, ctxs in contexts.items():
        for at in times:
            resolved = book.resolve(entries[0].model, book.resolve_tier(
                None, [] if tier == STANDARD else [tier], model=entries[0].model, at=at), at, upstream=upstream)
            for ctx in ctxs:
                for label, tokens, usage in _samples(sizes):
                    theirs = memo.price(m, usage, at, ctx)
                    mine = None if resolved is None else usd(price_tokens(resolved.price, tokens).cost.total)
                    if isinstance(theirs, str) or mine is None or abs(mine - theirs) > TOLERANCE:
                        got = "no entry" if mine is None else f"${mine.normalize():f}"
                        want = theirs if isinstance(theirs, str) else f"${theirs.normalize():f}"
                        where = f" ({ctx})" if ctx else ""
                        return Mismatch(provider.id, m.id, tier, f"{at:%Y-%m-%d %H:%M:%S}Z, {label}{where}: "
                                                                 f"llmmeter {got}, {PACKAGE} {want}")
    return None


def tier_contexts(m: Any) -> dict[str, list[dict[str, str] | None]]:
    """Each tier llmmeter has for the model, and the request contexts genai-prices gives it."""
    out: dict[str, list[dict[str, str] | None]] = {STANDARD: [None, {"service_tier": "default"}]}
    for v in m.price_variants or ():
        tier = tier_of(v.when)
        if tier is not None and dict(v.when) not in out.setdefault(tier, []):
            out[tier].append(dict(v.when))
    return out


class Theirs:
    """genai-prices' price of a usage: its own resolution (`ModelInfo.get_prices`, the step
    `calc_price` takes for a model and context at a time) and its own arithmetic
    (`ModelPrice.calc_price`), remembered per resolved price, since most samples repeat one. A
    resolved price without an output price gets the input price there (SPEC: a category the data
    lacks takes the input price, never 0); `filled` collects the categories so filled."""

    def __init__(self) -> None:
        self._memo: dict[tuple[str, tuple[tuple[str, int], ...]], Decimal | str] = {}
        self.filled: set[str] = set()

    def price(self, m: Any, usage: dict[str, int], at: datetime, ctx: dict[str, str] | None) -> Decimal | str:
        import genai_prices

        resolved = m.get_prices(at, ctx)
        keys = {k: v for k, v in vars(resolved).items() if not k.startswith("_") and v is not None}
        if "input_mtok" in keys and "output_mtok" not in keys:
            # Its calculator bills output it has no price for at 0; llmmeter bills it at the input price.
            resolved = type(resolved)(**{**keys, "output_mtok": keys["input_mtok"]})
            if usage.get("output_tokens"):
                self.filled.add("output")
        key = (repr(resolved), tuple(sorted(usage.items())))
        found = self._memo.get(key)
        if found is None:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # price keys of other units: not what is compared
                    found = resolved.calc_price(genai_prices.Usage(**usage))["total_price"]
            except (ValueError, LookupError) as e:
                found = f"cannot price it ({e})"
            self._memo[key] = found
        return found


def _instants(m: Any, t: Any, entries: list[Price], extra: Iterable[datetime]) -> list[datetime]:
    days: set[date] = {FIRST_EFFECTIVE.date()}
    conditions = [] if isinstance(m.prices, t.ModelPrice) else [c.constraint for c in m.prices]
    conditions += [v.constraint for v in m.price_variants or ()]
    days |= {c.start_date for c in conditions if isinstance(c, t.StartDateConstraint)}
    out: set[datetime] = set(extra)
    for d in days:
        midnight = datetime(d.year, d.month, d.day, tzinfo=UTC)
        out |= {midnight, midnight - timedelta(seconds=1)}
    for p in entries:
        out |= {p.effective_from, p.effective_from - timedelta(seconds=1)}
    return sorted(x for x in out if x >= FIRST_EFFECTIVE)  # nothing is priced before the first entry


def _sizes(m: Any, t: Any, entries: list[Price]) -> list[int]:
    edges = {b.above_input_tokens for p in entries for b in p.bands}
    for prices in _all_prices(m, t):
        for v in vars(prices).values():
            if isinstance(v, t.TieredPrices):
                edges |= {step.start for step in v.tiers}
    sizes = {_BASE_SIZE} | {n for e in edges for n in (e, e + 1)}
    return sorted(n for n in sizes if n <= MAX_TOKENS)


def _all_prices(m: Any, t: Any) -> Iterator[Any]:
    if isinstance(m.prices, t.ModelPrice):
        yield m.prices
    else:
        yield from (c.prices for c in m.prices)
    yield from (v.prices for v in m.price_variants or ())


def _samples(sizes: list[int]) -> Iterator[tuple[str, Tokens, dict[str, int]]]:
    """(what, llmmeter's tokens, genai-prices' usage) for each category at each input-side size;
    genai-prices counts cache reads and writes inside input_tokens, 1-hour writes inside writes."""
    for s in sizes:
        yield f"{s:,} input tokens", Tokens(s, 0, 0, 0), {"input_tokens": s}
        yield f"{s:,} cache reads", Tokens(0, s, 0, 0), {"input_tokens": s, "cache_read_tokens": s}
        yield f"{s:,} cache writes", Tokens(0, 0, s, 0), {"input_tokens": s, "cache_write_tokens": s}
        yield (f"{s:,} 1-hour cache writes", Tokens(0, 0, 0, 0, cache_write_1h=s),
               {"input_tokens": s, "cache_write_tokens": s, "cache_write_1h_tokens": s})
        yield (f"{s:,} input + {_OUTPUT:,} output tokens", Tokens(s, 0, 0, _OUTPUT),
               {"input_tokens": s, "output_tokens": _OUTPUT})
        if s != sizes[0]:
            continue  # the parts below are priced apart from the band: once is enough
        for kind in ("reasoning", "citation"):
            yield (f"{s:,} input + {_OUTPUT:,} output tokens, half of them {kind}", Tokens(s, 0, 0, _OUTPUT),
                   {"input_tokens": s, "output_tokens": _OUTPUT, f"output_{kind}_tokens": _OUTPUT // 2})
        yield (f"{s:,} input tokens + {_SEARCHES} web searches", Tokens(s, 0, 0, 0, web_search_calls=_SEARCHES),
               {"input_tokens": s, "web_searches": _SEARCHES})


# ---- names ----------------------------------------------------------------------------------------

def check_names(data: Data, book: PriceBook, only: set[str] | None) -> list[Mismatch]:
    """Names that reach an imported model (of `only`) which genai-prices does not price as it: the
    id of another model (claims go by model id, never by the names and globs an entry matches),
    or a name the entry's own provider prices as another model."""
    provider_of: dict[str, str] = {}
    items: dict[str, list[str]] = {}
    for p in book.prices:
        pid = imported_from(p)
        if pid is not None:
            provider_of.setdefault(p.model, pid)
            items.setdefault(p.model, []).extend(p.match)
    providers = {p.id: p for p in data.providers}
    ids: dict[str, str] = {}  # lower-cased model id -> "provider's model", of the providers imported
    for prov in (p for p in data.providers if p.id in provider_of.values()):
        for m in prov.models:
            ids.setdefault(m.id.lower(), f"{prov.id}'s {m.id!r}")
    probes = set(ids) | {instance(n).lower() for names in items.values() for n in names}
    out: list[Mismatch] = []
    seen: set[tuple[str, str]] = set()
    for name in sorted(probes):
        model = book.canonical_model(name, None)
        if model is None or model not in provider_of or (only is not None and model not in only):
            continue
        if name == model.lower():
            continue
        pid = provider_of[model]
        if name in ids:
            what = f"name {name!r} is {ids[name]} id, priced as {model!r}"
        else:
            theirs = providers[pid].find_model(name, all_providers=list(data.providers))
            if theirs is not None and theirs.id == model:
                continue
            what = f"name {name!r}: {PACKAGE} ({pid}) prices it as {theirs.id if theirs else 'no model'!r}, " \
                   f"the tables as {model!r}"
        item = responsible(items[model], name)
        if (model, item or name) not in seen:
            seen.add((model, item or name))
            out.append(Mismatch(pid, model, "names", what, name=name, glob=item))
    return out


def responsible(items: Sequence[str], name: str) -> str | None:
    """The match item of a model that reaches `name` as PriceBook does: the exact name, else the
    longest glob (the first of equal length)."""
    import fnmatch

    exact = [n for n in items if not is_glob(n) and n.lower() == name]
    if exact:
        return exact[0]
    globs = sorted((n for n in dict.fromkeys(items) if is_glob(n) and fnmatch.fnmatchcase(name, n.lower())),
                   key=lambda g: -len(g))
    return globs[0] if globs else None


def instance(item: str) -> str:
    """A name a match item means: itself, or one name a glob matches (`*` empty, `?` an `x`, a
    bracket its first character)."""
    out: list[str] = []
    i = 0
    while i < len(item):
        c = item[i]
        if c == "*":
            i += 1
        elif c == "?":
            out.append("x")
            i += 1
        elif c == "[" and (end := item.find("]", i + 2)) > 0:
            body = item[i + 1:end]
            out.append("x" if body.startswith("!") else body[0])
            i = end + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)
