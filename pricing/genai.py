"""`llmmeter prices import genai-prices` and `llmmeter prices diff --against genai-prices`
(SPEC "Price tables, version 2" → Price data).

Import writes one table per provider, `genai-prices-<provider id>.toml`, beside whatever tables
the directory already has, and never rewrites a published entry: a price that changed is a new
entry effective from the import date (00:00Z), appended; an unchanged one adds nothing, so a
second import changes no byte. An entry written by hand (its `source` does not name genai-prices)
keeps its model and tier: the import leaves them to it and says so.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pricing.genai_data import PACKAGE, Data, ProviderTable, Skipped, convert, load
from pricing.loader import PriceTableError, check_dir, load_dir
from pricing.model import Price
from pricing.toml_writer import entry_text, price_text, table_text
from proxy.errors import ConfigError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

FILE_PREFIX = "genai-prices-"
_PROVIDER_IN_SOURCE = re.compile(rf"^{re.escape(PACKAGE)} \S+ .*?provider (\S+), model ")
_FIELDS = ("input", "output", "cache_read", "cache_write", "cache_write_1h", "web_search_per_1k")
_BAND_FIELDS = ("input", "output", "cache_read", "cache_write", "cache_write_1h")
Key = tuple[str, str, str | None, str | None]  # model (lower-cased), tier, upstream, inference_geo


def table_name(provider: str) -> str:
    return f"{FILE_PREFIX}{provider}.toml"


def imported_from(p: Price) -> str | None:
    """The genai-prices provider an entry was imported from; None for an entry written by hand."""
    m = _PROVIDER_IN_SOURCE.match(p.source)
    return m.group(1) if m else None


def differences(a: Price, b: Price) -> list[str]:
    """What prices a request differently under `b` than under `a`, one phrase each ([] when none).
    A band price left out is the entry's own, so a band is compared as it prices."""
    out = [f"{k} {_show(getattr(a, k))} → {_show(getattr(b, k))}"
           for k in _FIELDS if getattr(a, k) != getattr(b, k)]
    bands_a = {band.above_input_tokens: band for band in a.bands}
    bands_b = {band.above_input_tokens: band for band in b.bands}
    for n in sorted(bands_a.keys() | bands_b.keys()):
        if n not in bands_b or n not in bands_a:
            out.append(f"band above {n:,} input-side tokens only in the {'first' if n in bands_a else 'second'}")
            continue
        for k in _BAND_FIELDS:
            va = getattr(bands_a[n], k)
            vb = getattr(bands_b[n], k)
            va = getattr(a, k) if va is None else va
            vb = getattr(b, k) if vb is None else vb
            if va != vb:
                out.append(f"band above {n:,}: {k} {_show(va)} → {_show(vb)}")
    return out


def _show(v: Decimal | None) -> str:
    return "-" if v is None else price_text(v)


# ---- import ---------------------------------------------------------------------------------------

@dataclass
class ImportResult:
    added: dict[str, int] = field(default_factory=dict)  # file name -> entries appended or written
    skipped: list[Skipped] = field(default_factory=list)
    unchanged: int = 0  # model-tier histories already in the directory at the same prices


def select(data: Data, providers: Sequence[str] | None) -> list[Any]:
    known = {p.id: p for p in data.providers}
    if not providers:
        return list(data.providers)
    unknown = [p for p in providers if p not in known]
    if unknown:
        raise ConfigError(f"{PACKAGE} {data.version} has no provider {', '.join(map(repr, unknown))} "
                          f"(it has: {', '.join(sorted(known))})")
    return [known[p] for p in dict.fromkeys(providers)]


def parse_upstreams(items: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        provider, sep, name = item.partition("=")
        if not sep or not provider.strip() or not name.strip():
            raise ConfigError(f"--upstream {item!r}: write PROVIDER_ID=UPSTREAM_NAME, e.g. azure=azure-east")
        out[provider.strip()] = name.strip()
    return out


def import_tables(data: Data, out: Path, *, providers: Sequence[str] | None = None, models: Sequence[str] = (),
                  upstreams: dict[str, str] | None = None, today: date | None = None) -> ImportResult:
    """Import into `out` (created if missing); the tables are checked by the loader before and after."""
    upstreams = upstreams or {}
    chosen = select(data, providers)
    stray = sorted(set(upstreams) - {p.id for p in chosen})
    if stray:
        raise ConfigError(f"--upstream names provider {', '.join(map(repr, stray))}, which this import does not "
                          f"read")
    day = today or datetime.now(UTC).date()
    now = datetime(day.year, day.month, day.day, tzinfo=UTC)
    existing = _existing(out)
    tables = [convert(data, p, models) for p in chosen]
    result = ImportResult(skipped=[s for t in tables for s in t.skipped])
    planned = _resolve_claims(tables, upstreams, result)
    appended = _plan(planned, existing, now, result)
    _write(out, appended, data.version)
    result.added = {table_name(p): len(entries) for p, entries in appended.items() if entries}
    return result


def _existing(out: Path) -> list[Price]:
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: not a directory")
    if not out.is_dir() or not any(out.glob("*.toml")):
        return []
    return load_dir(out)  # a broken directory is reported, never written into


def _resolve_claims(tables: list[ProviderTable], upstreams: dict[str, str], result: ImportResult
                    ) -> list[tuple[str, list[Price]]]:
    """Per provider, its entries once a model id claimed by several providers is settled: a
    provider given --upstream prices it for that upstream; the others must agree, else it is
    skipped; agreeing claimants write it once, in the first one's table."""
    by_model: dict[str, list[tuple[str, list[Price]]]] = {}
    for t in tables:
        for p in t.entries:
            claims = by_model.setdefault(p.model.lower(), [])
            if not claims or claims[-1][0] != t.id:
                claims.append((t.id, []))
            claims[-1][1].append(p)
    keep: dict[str, list[Price]] = {t.id: [] for t in tables}
    for claims in by_model.values():
        if len(claims) == 1:
            keep[claims[0][0]] += claims[0][1]
            continue
        mapped = [(pid, es) for pid, es in claims if pid in upstreams]
        for pid, es in mapped:
            keep[pid] += [replace(e, upstream=upstreams[pid]) for e in es]
        rest = [(pid, es) for pid, es in claims if pid not in upstreams]
        if not rest:
            continue
        first_id, first = rest[0]
        if all(_same_history(first, es) for _, es in rest[1:]):
            keep[first_id] += first
            result.skipped += [Skipped(pid, es[0].model, f"priced as {first_id} prices it: written once, in "
                                       f"{table_name(first_id)}") for pid, es in rest[1:]]
        else:
            ids = ", ".join(pid for pid, _ in claims)
            result.skipped += [Skipped(pid, es[0].model, f"claimed at different prices by {ids}: give --upstream "
                                       f"{pid}=UPSTREAM to price that upstream's traffic with {pid}'s prices")
                               for pid, es in rest]
    return [(t.id, keep[t.id]) for t in tables]


def _same_history(a: list[Price], b: list[Price]) -> bool:
    if len(a) != len(b):
        return False
    return all((x.tier, x.effective_from) == (y.tier, y.effective_from) and not differences(x, y)
               for x, y in zip(a, b, strict=True))


def _plan(planned: list[tuple[str, list[Price]]], existing: list[Price], now: datetime, result: ImportResult
          ) -> dict[str, list[Price]]:
    """What to append to each provider's table: new model-tier histories whole; for a published
    one, an entry effective `now` (and any later-dated ones) where the price in force differs."""
    published: dict[Key, list[Price]] = {}
    names: dict[str, str] = {}  # lower-cased name or glob -> the model it means in the directory
    for p in existing:
        published.setdefault(_key(p), []).append(p)
        for n in (p.model, *p.match):
            names.setdefault(n.lower(), p.model)
    out: dict[str, list[Price]] = {}
    for provider, entries in planned:
        todo = out.setdefault(provider, [])
        histories: dict[Key, list[Price]] = {}
        for e in entries:
            histories.setdefault(_key(e), []).append(e)
        for key, history in histories.items():
            owner = names.get(key[0])
            if owner is not None and owner != history[0].model:
                result.skipped.append(Skipped(provider, history[0].model, f"the name already means {owner!r} in "
                                              f"this directory"))
                continue
            history = [_own_names(e, names, provider, result) for e in history]
            before = sorted(published.get(key, []), key=lambda p: p.effective_from)
            by_hand = [p for p in before if imported_from(p) is None]
            if by_hand:
                result.skipped.append(Skipped(provider, key[0], f"{key[1]}: kept as written by hand in "
                                              f"{Path(by_hand[0].file).name}:{by_hand[0].line}"))
                continue
            if not before:
                todo += history
                published[key] = list(history)
                continue
            fresh = _changes(history, before, now, provider, result)
            result.unchanged += not fresh
            todo += fresh
            published[key] = before + fresh
    return out


def _own_names(e: Price, names: dict[str, str], provider: str, result: ImportResult) -> Price:
    kept = []
    for n in e.match:
        owner = names.setdefault(n.lower(), e.model)
        if owner == e.model:
            kept.append(n)
        else:
            result.skipped.append(Skipped(provider, e.model, f"name {n!r} already means {owner!r}: left out"))
    return replace(e, match=tuple(kept))


def _changes(history: list[Price], before: list[Price], now: datetime, provider: str, result: ImportResult
             ) -> list[Price]:
    in_force = [e for e in history if e.effective_from <= now]
    candidates = ([replace(in_force[-1], effective_from=now)] if in_force else []) + \
        [e for e in history if e.effective_from > now]
    fresh: list[Price] = []
    for c in candidates:
        current = [p for p in [*before, *fresh] if p.effective_from <= c.effective_from]
        last = max(current, key=lambda p: p.effective_from) if current else None
        if last is not None and not differences(last, c):
            continue
        if last is not None and last.effective_from == c.effective_from:
            result.skipped.append(Skipped(provider, c.model, f"{c.tier}: an entry effective "
                                          f"{c.effective_from.date()} is published at other prices "
                                          f"({last.file}:{last.line}); never rewritten"))
            continue
        fresh.append(replace(c, match=c.match if not fresh and c.tier == "standard" else ()))
    return fresh


def _key(p: Price) -> Key:
    return (p.model.lower(), p.tier, p.upstream, p.inference_geo)


def _write(out: Path, appended: dict[str, list[Price]], version: str) -> None:
    """Write every table, then check the directory; a result the loader refuses is undone."""
    writes = {out / table_name(provider): entries for provider, entries in appended.items() if entries}
    if not writes:
        return
    out.mkdir(parents=True, exist_ok=True)
    before = {path: path.read_bytes() if path.exists() else None for path in writes}
    for path, entries in writes.items():
        old = before[path]
        if old is None:
            header = [f"Written by `llmmeter prices import genai-prices` from {PACKAGE} {version}, USD per",
                      "million tokens (web_search_per_1k: per 1,000 calls). Never edit a published entry: a",
                      "later import appends a changed price as a new entry effective from its date."]
            path.write_text(table_text(header, entries), encoding="utf-8")
        else:
            text = old.decode("utf-8")
            path.write_text(text + ("" if text.endswith("\n") else "\n")
                            + "".join("\n" + entry_text(e) for e in entries), encoding="utf-8")
    errors = check_dir(out)
    if errors:
        for path, old in before.items():
            if old is None:
                path.unlink()
            else:
                path.write_bytes(old)
        raise PriceTableError([f"the import would leave {out} invalid, nothing was written:", *errors])


def print_import(result: ImportResult, out: Path, version: str, stream: TextIO) -> None:
    for s in result.skipped:
        print(f"skipped  {s}", file=stream)
    for name, n in sorted(result.added.items()):
        print(f"wrote    {out / name}: {n} new {'entry' if n == 1 else 'entries'}", file=stream)
    kinds = _skip_kinds(result.skipped)
    summary = ", ".join(f"{n} {what}" for what, n in kinds.items()) or "none"
    total = sum(result.added.values())
    print(f"{PACKAGE} {version} → {out}: {total} new {'entry' if total == 1 else 'entries'} in "
          f"{len(result.added)} {'table' if len(result.added) == 1 else 'tables'}, {result.unchanged} "
          f"model-tier histories unchanged; skipped: {summary}", file=stream)


def _skip_kinds(skipped: Iterable[Skipped]) -> dict[str, int]:
    kinds = {"time-of-day": "time-of-day prices", "cannot be held by a price entry": "prices of other units",
             "variant": "request variants", "regex": "name patterns no glob says",
             "more than": "prices rounded to 10 places", "different prices": "models claimed at different prices",
             "written once": "models priced alike by several providers", "by hand": "kept as written by hand",
             "name": "names already meaning another model", "no input token price": "models without a token price",
             "ceiling": "prices above the ceiling", "never rewritten": "published entries not rewritten"}
    counts: dict[str, int] = {}
    for s in skipped:
        what = next((label for needle, label in kinds.items() if needle in s.what), "other")
        counts[what] = counts.get(what, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def import_command(args: argparse.Namespace) -> int:
    from proxy import settings as config

    out: Path | None = args.out
    if out is None:
        out = config.load(args.config or config.default_config_path(), overrides={}).prices_dir
        if out is None:
            raise ConfigError("prices import: give --out DIR (or [pricing] dir / LLMMETER_PRICES): the shipped "
                              "tables are not written in place")
    data = load()
    result = import_tables(data, out, providers=args.provider, models=args.models or (),
                           upstreams=parse_upstreams(args.upstream or ()))
    print_import(result, out, data.version, sys.stdout)
    return 0


# ---- diff -----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Difference:
    model: str
    tier: str
    upstream: str | None
    what: str

    def __str__(self) -> str:
        at = f" upstream {self.upstream}" if self.upstream else ""
        return f"{self.model} {self.tier}{at}: {self.what}"


def diff_tables(data: Data, directory: Path, at: datetime) -> tuple[list[Difference], list[str]]:
    """Every model-tier whose price in force at `at` differs from genai-prices', or that one side
    lacks; and notes on what was not compared."""
    mine = _in_force(load_dir(directory), at)
    imported = {pid for p in mine.values() if (pid := imported_from(p)) is not None}
    ids = {p.model.lower() for p in mine.values()}
    providers = [p for p in data.providers if p.id in imported or any(m.id.lower() in ids for m in p.models)]
    theirs: dict[str, dict[tuple[str, str], Price]] = {}  # provider -> (model, tier) -> entry in force
    for provider in providers:
        table = convert(data, provider)
        theirs[provider.id] = {(k[0], k[1]): p for k, p in _in_force(list(table.entries), at).items()}
    found: list[Difference] = []
    notes: list[str] = []
    for key, p in sorted(mine.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or "", kv[0][3] or "")):
        if p.inference_geo is not None:
            notes.append(f"{p.model} {p.tier} inference_geo {p.inference_geo}: {PACKAGE} has no regions, not compared")
            continue
        where = f"{Path(p.file).name}:{p.line}"
        source = imported_from(p)
        claimants = [source] if source in theirs else [pid for pid in theirs if (key[0], key[1]) in theirs[pid]]
        matches = [(pid, theirs[pid][(key[0], key[1])]) for pid in claimants if (key[0], key[1]) in theirs[pid]]
        if not matches:
            found.append(Difference(p.model, p.tier, p.upstream, f"only in {directory} ({where}), not in {PACKAGE}"))
            continue
        if any(not differences(p, q) for _, q in matches):
            continue
        pid, q = matches[0]
        found.append(Difference(p.model, p.tier, p.upstream, f"{'; '.join(differences(p, q))} ({where} → "
                                f"{PACKAGE} {pid})"))
    have = {(k[0], k[1]) for k in mine}
    seen: set[tuple[str, str]] = set()
    for pid in sorted(imported & theirs.keys()):
        for (model, tier), q in sorted(theirs[pid].items()):
            if (model, tier) in have or (model, tier) in seen:
                continue
            seen.add((model, tier))
            found.append(Difference(q.model, tier, None, f"only in {PACKAGE} ({pid}), not in {directory}"))
    return found, notes


def _in_force(prices: list[Price], at: datetime) -> dict[Key, Price]:
    out: dict[Key, Price] = {}
    for p in prices:
        k = _key(p)
        if p.effective_from <= at and (k not in out or out[k].effective_from < p.effective_from):
            out[k] = p
    return out


def diff_command(args: argparse.Namespace, tables: Path | Traversable, origin: str) -> int:
    """`prices diff` of `tables` (the directory in use, `origin` saying why) against genai-prices."""
    from zoneinfo import ZoneInfo

    from proxy.export import parse_when

    directory = Path(str(tables))
    at = parse_when(args.at, ZoneInfo("UTC")) if args.at else datetime.now(UTC)
    data = load()
    found, notes = diff_tables(data, directory, at)
    print(f"{directory} ({origin}) against {PACKAGE} {data.version}, prices in force at {at.isoformat()}")
    for note in notes:
        print(f"note     {note}")
    for d in found:
        print(f"{'missing' if d.what.startswith('only in') else 'differs'}  {d}")
    print(f"{len(found)} {'difference' if len(found) == 1 else 'differences'}" if found else "no differences")
    return 1 if found else 0
