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
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pricing.genai_data import FIRST_EFFECTIVE, PACKAGE, Data, ProviderTable, Skipped, convert, load
from pricing.genai_verify import Filled, imported_from, verify
from pricing.loader import PriceTableError, check_dir, load_dir
from pricing.model import Price
from pricing.toml_writer import entry_text, price_text, table_text
from proxy.errors import ConfigError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

FILE_PREFIX = "genai-prices-"
_FIELDS = ("input", "output", "cache_read", "cache_write", "cache_write_1h", "web_search_per_1k")
_BAND_FIELDS = ("input", "output", "cache_read", "cache_write", "cache_write_1h")
Key = tuple[str, str, str | None, str | None]  # model (lower-cased), tier, upstream, inference_geo


def table_name(provider: str) -> str:
    return f"{FILE_PREFIX}{provider}.toml"


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
    filled: list[Filled] = field(default_factory=list)  # categories written at the input price, not compared


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
    existing = _existing(out)
    appended, result = plan_import(data, existing, chosen, models, upstreams, day)
    _write(out, appended, data.version)
    return result


def plan_import(data: Data, existing: list[Price], chosen: Sequence[Any], models: Sequence[str],
                upstreams: dict[str, str], day: date) -> tuple[dict[str, list[Price]], ImportResult]:
    """What an import appends to each provider's table (nothing written), and what it skips: only
    entries that `verify` finds priced as genai-prices prices them, with their names."""
    now = datetime(day.year, day.month, day.day, tzinfo=UTC)
    tables = [convert(data, p, models) for p in chosen]
    result = ImportResult(skipped=[s for t in tables for s in t.skipped])
    planned = _resolve_claims(tables, upstreams, result)
    appended = _verified(data, _plan(planned, existing, now, result), existing, result,
                         since=now if existing else FIRST_EFFECTIVE)
    result.added = {table_name(p): len(entries) for p, entries in appended.items() if entries}
    return appended, result


def _verified(data: Data, appended: dict[str, list[Price]], existing: list[Price], result: ImportResult,
              since: datetime) -> dict[str, list[Price]]:
    """`appended` less what genai-prices' calculator disagrees with: a name that reaches a model
    genai-prices does not price it as is left out of that model's names; a model priced otherwise
    at any sample is left out whole (its traffic stays unpriced and alarmed, never priced wrong).
    Leaving something out can hand a name to another model, so it is checked again until clean."""
    for _ in range(20):
        writing = {e.model for es in appended.values() for e in es}
        checked = verify(data, [*existing, *(e for es in appended.values() for e in es)], only=writing, since=since)
        found = [f for f in checked.mismatches if f.model in writing]
        if not found:
            result.filled = [f for f in checked.filled if f.model in writing]
            return appended
        gone: set[str] = set()
        names: dict[str, set[str]] = {}
        for f in found:
            mine = [e for e in appended.get(f.provider, ()) if e.model == f.model]
            if f.glob is not None and any(f.glob in e.match for e in mine):
                names.setdefault(f.model, set()).add(f.glob)
                result.skipped.append(Skipped(f.provider, f.model, f"name {f.glob!r} left out: {f.what}"))
            elif f.model not in gone:
                gone.add(f.model)
                result.skipped.append(Skipped(f.provider, f.model, f"not written, {PACKAGE}'s calculator prices it "
                                                                   f"otherwise: {f.tier}: {f.what}"))
        appended = {pid: [replace(e, match=tuple(n for n in e.match if n not in names.get(e.model, ())))
                          for e in es if e.model not in gone] for pid, es in appended.items()}
    raise ConfigError("prices import: the verification against genai-prices did not settle; nothing was written")


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
    for f in result.filled:
        print(f"filled   {f}", file=stream)
    for name, n in sorted(result.added.items()):
        print(f"wrote    {out / name}: {n} new {'entry' if n == 1 else 'entries'}", file=stream)
    kinds = _skip_kinds(result.skipped)
    summary = ", ".join(f"{n} {what}" for what, n in kinds.items()) or "none"
    total = sum(result.added.values())
    print(f"{PACKAGE} {version} → {out}: {total} new {'entry' if total == 1 else 'entries'} in "
          f"{len(result.added)} {'table' if len(result.added) == 1 else 'tables'}, {result.unchanged} "
          f"model-tier histories unchanged; skipped: {summary}", file=stream)


def _skip_kinds(skipped: Iterable[Skipped]) -> dict[str, int]:
    kinds = {"parts an entry cannot hold": "models with per-request fees or token rates of their own",
             "calculator prices it otherwise": "models genai-prices' calculator prices otherwise",
             "left out: name": "names genai-prices prices as another model",
             "time-of-day": "time-of-day prices", "cannot be held by a price entry": "prices of other units",
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
    """Imported entries that genai-prices' calculator prices otherwise (`verify`: every date, band
    edge, category and tier, plus `at`), models a fresh import would write that the directory
    lacks, and hand-written entries whose prices in force at `at` differ; and notes: what a fresh
    import skips, with its reason, and the categories filled with the input price that were not
    compared with genai-prices (listed, never counted as differences)."""
    prices = load_dir(directory)
    imported = {pid for p in prices if (pid := imported_from(p)) is not None}
    checked = verify(data, prices, instants=[at])
    found = [Difference(f.model, f.tier, None, f"{f.what} ({PACKAGE} {f.provider})") for f in checked.mismatches]
    # A fresh import of every provider: one of fewer providers writes at least what it writes for them.
    fresh, result = plan_import(data, [], data.providers, (), {}, at.date())
    have = {(p.model.lower(), p.tier) for p in prices}
    for pid, entries in ((pid, es) for pid, es in fresh.items() if pid in imported):
        for model, tier in dict.fromkeys((e.model, e.tier) for e in entries):
            if (model.lower(), tier) not in have:
                found.append(Difference(model, tier, None, f"only in {PACKAGE} ({pid}), not in {directory}"))
    notes = [f"skipped  {s}" for s in result.skipped
             if s.provider in imported and s.model.lower() not in {k[0] for k in have}]
    notes += [f"filled   {f}" for f in checked.filled]
    by_hand, hand_notes = _by_hand(data, prices, at, directory)
    return found + by_hand, notes + hand_notes


def _by_hand(data: Data, prices: list[Price], at: datetime, directory: Path) -> tuple[list[Difference], list[str]]:
    """Entries written by hand, in force at `at`, against every provider that lists the model."""
    mine = {k: p for k, p in _in_force(prices, at).items() if imported_from(p) is None}
    ids = {p.model.lower() for p in mine.values()}
    theirs: dict[tuple[str, str], list[tuple[str, Price]]] = {}
    for provider in data.providers:
        if any(m.id.lower() in ids for m in provider.models):
            for k, q in _in_force(list(convert(data, provider).entries), at).items():
                theirs.setdefault((k[0], k[1]), []).append((provider.id, q))
    found: list[Difference] = []
    notes: list[str] = []
    for key, p in sorted(mine.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or "", kv[0][3] or "")):
        if p.inference_geo is not None:
            notes.append(f"note     {p.model} {p.tier} inference_geo {p.inference_geo}: {PACKAGE} has no regions, "
                         f"not compared")
            continue
        where = f"{Path(p.file).name}:{p.line}"
        matches = theirs.get((key[0], key[1]), [])
        if not matches:
            found.append(Difference(p.model, p.tier, p.upstream, f"only in {directory} ({where}), not in {PACKAGE}"))
        elif all(differences(p, q) for _, q in matches):
            pid, q = matches[0]
            found.append(Difference(p.model, p.tier, p.upstream, f"{'; '.join(differences(p, q))} ({where} → "
                                    f"{PACKAGE} {pid})"))
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
    print(f"{directory} ({origin}) against {PACKAGE} {data.version}'s calculator: every date prices change, "
          f"and {at.isoformat()}")
    for note in notes:
        print(note)
    for d in found:
        print(f"{'missing' if d.what.startswith('only in') else 'differs'}  {d}")
    print(f"{len(found)} {'difference' if len(found) == 1 else 'differences'}" if found else "no differences")
    return 1 if found else 0
