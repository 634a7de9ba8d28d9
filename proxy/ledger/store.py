"""What the ledger needs from a database, and the one place a URL picks the backend.

A backend has a migrate step, a per-thread writer that inserts batches idempotently on
the primary key, and read queries that stream. SQLite (sqlite.py) and PostgreSQL
(postgres.py) sit side by side behind the same two protocols.

Money never overflows and never turns into a float (migration 005). A record costs at most
MAX_COST_UNITS (4 x 10^19 units, pricing/calculator.py), more than BIGINT holds, so it is
stored as `cost_units` (the cost modulo 10^18: the whole cost for any record under $100M)
plus `cost_carry` (the cost's multiples of 10^18). Sums are taken in two parts that each fit:
whole dollars (at most 4 x 10^9 per record) and the rest (under 10^10 per record); the
hourly rollup keeps them the same way (`cost_usd`, and `cost_units` below 10^10). So a SQL
sum over n records stays below 9.2 x 10^18 for n up to 9.2 x 10^8 records in one UTC hour
and attribution key, even with every record at the caps (tests/ledger/test_money_bounds.py);
SQLite's SUM() raises rather than overflow, its `+` is checked by a CHECK constraint, and
Python adds the parts together into one exact integer. Token counts are refused above
MAX_TOKENS (10^9) per field, so their sums fit for 9.2 x 10^9 records an hour.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from pricing.calculator import MAX_COST_UNITS, MAX_TOKENS, UNITS_PER_USD
from proxy.errors import LLMMeterError
from proxy.ledger.record import Record

# Database columns: the Record's fields in declaration order, then the cost's carry (005).
COLUMNS: tuple[str, ...] = (*(f.name for f in fields(Record)), "cost_carry")
CARRY = 10**18  # cost = cost_carry * CARRY + cost_units
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


class StoreUnavailable(LLMMeterError):
    """The database refused a write or read (locked, full, gone); the ledger retries."""


class LedgerReplaced(StoreUnavailable):
    """The SQLite file at the ledger's path is no longer the one this process opened (removed
    or replaced): nothing is written until it is back; a restart takes the new file."""


class RecordRefused(LLMMeterError):
    """The database refused what is in a record (a value out of range, a constraint), not the
    write itself: retrying it cannot help, so the ledger sets it aside (proxy/ledger/deadletter.py)."""


class LedgerMissing(LLMMeterError):
    """A read-only command was given a ledger that does not exist: it never creates one."""


class LedgerOutdated(LLMMeterError):
    """A read-only command was given a ledger that lacks migrations this llmmeter reads with."""

    def __init__(self, where: str, versions: Sequence[int]) -> None:
        names = ", ".join(f"{v:03d}" for v in versions)
        super().__init__(f"{where}: the ledger lacks schema migration(s) {names}; a read-only command does not "
                         "migrate: run `llmmeter serve` against it once, or read it with the llmmeter that wrote it")


class LedgerTooNew(LLMMeterError):
    """The ledger has migrations this llmmeter does not know; it is not written to."""

    def __init__(self, where: str, versions: Sequence[int]) -> None:
        names = ", ".join(f"{v:03d}" for v in versions)
        super().__init__(f"{where}: the ledger has schema migration(s) {names}, newer than this llmmeter knows; "
                         "it was upgraded by a newer llmmeter: run that version (or newer) against it")


class Writer(Protocol):
    """One database connection, used by one thread only."""

    def insert_many(self, records: Sequence[Record]) -> int:
        """Insert in one transaction; ids already present are left alone. Returns rows added."""
        ...

    def close(self) -> None: ...


class Store(Protocol):
    def migrate(self) -> int:
        """Apply pending numbered migrations; returns how many ran. A read-only store checks the
        versions instead (LedgerTooNew, LedgerOutdated) and returns 0."""
        ...

    def writer(self) -> Writer: ...

    def query(self, start_from: datetime, start_to: datetime, tenant: str | None) -> Iterator[Record]:
        """Records with start in [from, to), ordered by (start, id), streamed."""
        ...

    def count(self, start_from: datetime, start_to: datetime, tenant: str | None) -> int: ...

    def cost_by_tenant(self, start_from: datetime, start_to: datetime) -> dict[str, int]:
        """Sum of cost units per tenant over [from, to), summed by the database."""
        ...

    def default_journal_dir(self) -> Path: ...


    def hourly(self, start_from: datetime, start_to: datetime, tenant: str | None) -> list[tuple[Any, ...]]:
        """HOURLY_SQL's rows for [from, to)."""
        ...

    def input_side_percentiles(self, start_from: datetime, start_to: datetime, tenant: str | None,
                               percents: Sequence[int]) -> dict[str, list[int]]:
        """Per tenant, exact nearest-rank percentiles of input-side tokens per metered request."""
        ...


# The report aggregates in the database: one row per UTC hour and attribution key, so
# its memory follows the number of distinct keys, never the number of requests.
# Portable SQL (SQLite and PostgreSQL): truth values as CASE 0/1, never summed booleans.
# Money is summed in two parts that cannot overflow (see the module docstring); money_rows()
# makes them one exact integer again.
METERED_SQL = "'chat', 'completions', 'embeddings', 'responses', 'messages'"
COST_USD = f"(cost_units / {UNITS_PER_USD} + cost_carry * {CARRY // UNITS_PER_USD})"  # whole dollars
# The units below a dollar; no `%`, which psycopg would take for a parameter.
COST_REST = f"(cost_units - cost_units / {UNITS_PER_USD} * {UNITS_PER_USD})"
INPUT_SIDE = "(input_tokens + cache_read_tokens + cache_write_tokens)"
# The size bucket a request counts in (migration 003): the largest bound at or below its input side.
BUCKET_OF = f"SELECT MAX(lo) FROM input_side_bounds WHERE lo <= {INPUT_SIDE}"
HOURLY_SQL = f"""
SELECT start / 3600000000 AS hour,
       COALESCE(model, model_requested, '') AS model, CASE WHEN model IS NULL THEN 1 ELSE 0 END AS unpriced_model,
       COALESCE(tier, '') AS tier, upstream, tenant, COALESCE(tag, '') AS tag, COALESCE(workload, '') AS workload,
       CASE WHEN endpoint IN ({METERED_SQL}) THEN 1 ELSE 0 END AS metered,
       COUNT(*) AS requests,
       SUM(input_tokens) AS input_tokens, SUM(cache_read_tokens) AS cache_read_tokens,
       SUM(cache_write_tokens) AS cache_write_tokens, SUM(output_tokens) AS output_tokens,
       COALESCE(SUM(reasoning_tokens), 0) AS reasoning_tokens,
       SUM(CASE WHEN usage_source = 'estimated' THEN 1 ELSE 0 END) AS estimated,
       SUM(CASE WHEN cost_units IS NULL AND outcome != 'rejected' AND endpoint IN ({METERED_SQL}) THEN 1 ELSE 0 END)
           AS unpriced,
       COALESCE(SUM({COST_USD}), 0) AS cost_usd, COALESCE(SUM({COST_REST}), 0) AS cost_rest
FROM requests WHERE {{where}}
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
"""
# The same rows from the rollup the 002 migration keeps: for ranges on whole UTC hours.
ROLLUP_SQL = """
SELECT hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered, requests,
       input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens,
       estimated, unpriced, cost_usd, cost_units
FROM hourly_rollup WHERE {where}
"""
# Month-to-date spend per tenant from the rollup, per hour: Python adds the hours up.
TENANT_COST_SQL = """
SELECT tenant, hour, SUM(cost_usd), SUM(cost_units) FROM hourly_rollup WHERE {where} GROUP BY 1, 2
"""


def money_rows(rows: Iterable[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """HOURLY_SQL or ROLLUP_SQL rows with the cost's two last columns (whole dollars, rest)
    made one exact integer of units, and every database number a Python int."""
    return [(*(_exact(v) for v in row[:-2]), _exact(row[-2]) * UNITS_PER_USD + _exact(row[-1])) for row in rows]


def tenant_costs(rows: Iterable[Sequence[Any]]) -> dict[str, int]:
    """TENANT_COST_SQL rows added up per tenant, in Python ints (no SQL sum over a month)."""
    out: dict[str, int] = {}
    for tenant, _hour, usd_part, rest in rows:
        out[tenant] = out.get(tenant, 0) + _exact(usd_part) * UNITS_PER_USD + _exact(rest)
    return out


def _exact(v: Any) -> Any:
    # PostgreSQL sums BIGINT as NUMERIC; a float would mean a sum went inexact: refuse it.
    if isinstance(v, Decimal):
        return int(v)
    if isinstance(v, float):
        raise StoreUnavailable(f"the ledger returned an inexact number {v!r} where sums must be integers")
    return v


def open_store(url: str, busy_timeout_s: float = 5.0, *, read_only: bool = False) -> Store:
    """`sqlite:///rel.db`, `sqlite:////abs.db` or a plain path; or `postgresql://user@host/db`.

    Nothing connects here: a database that is down surfaces later, as StoreUnavailable.
    `read_only` (report, export) is the exception: it opens and checks the ledger at once
    and never creates, migrates or writes anything (LedgerMissing, LedgerTooNew,
    LedgerOutdated); a SQLite snapshot in a read-only directory can be read.
    """
    if is_postgresql(url):
        from proxy.ledger.postgres import PostgresStore

        pg = PostgresStore(url, busy_timeout_s, read_only=read_only)
        if read_only:
            pg.migrate()
        return pg
    from proxy.ledger.sqlite import SqliteStore

    lite = SqliteStore(sqlite_path(url), busy_timeout_s, read_only=read_only, url=url)
    if read_only:
        lite.migrate()
    return lite


def is_postgresql(url: str) -> bool:
    scheme, sep, _ = url.partition("://")
    scheme = scheme.lower()
    return bool(sep) and (scheme in ("postgresql", "postgres") or scheme.startswith("postgresql+"))


def sqlite_path(url: str) -> Path:
    scheme, sep, rest = url.partition("://")
    if not sep:
        if not url.strip():
            raise ValueError("ledger URL is empty")
        return Path(url)
    scheme = scheme.lower()
    if scheme != "sqlite":
        raise ValueError(f"unsupported ledger URL scheme {scheme!r} "
                         "(use sqlite:///path/to/llmmeter.db or postgresql://user@host/db)")
    if not rest.startswith("/"):
        raise ValueError(f"ledger URL {url!r} needs three slashes: sqlite:///relative.db or sqlite:////abs.db")
    path = rest[1:].split("?", 1)[0]
    if not path or path == ":memory:":
        raise ValueError(f"ledger URL {url!r} must name a database file")
    return Path(path)


HOUR_US = 3_600_000_000  # an hour in microseconds; rollups are keyed by start // HOUR_US


def whole_hours(lo: int, hi: int) -> tuple[int, int]:
    """The whole UTC hours inside [lo, hi) microseconds, as [first, last); (hi, hi) if none.

    Rollups answer for those; the partial hours before and after (zones with half-hour
    offsets) are summed from the requests."""
    first, last = -(-lo // HOUR_US) * HOUR_US, hi // HOUR_US * HOUR_US
    return (first, last) if first < last else (hi, hi)


def to_micros(t: datetime) -> int:
    """Exact integer microseconds since the epoch; a naive time is taken as UTC."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return (t - _EPOCH) // _US


def from_micros(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def to_row(r: Record) -> tuple[Any, ...]:
    """The Record as a row in COLUMNS order (kept in step with 001_init.sql and 005); RecordRefused
    for a value beyond the caps the ledger's sums are sized for, or one that is no row at all."""
    try:
        pef = r.price_effective_from
        i, cr, cw, o, rt, cost = (r.input_tokens, r.cache_read_tokens, r.cache_write_tokens, r.output_tokens,
                                  r.reasoning_tokens, r.cost_units)
        # Spelled out, not a loop: this runs for every record on the importer thread.
        if not (type(i) is int and type(cr) is int and type(cw) is int and type(o) is int
                and 0 <= i <= MAX_TOKENS and 0 <= cr <= MAX_TOKENS and 0 <= cw <= MAX_TOKENS and 0 <= o <= MAX_TOKENS
                and (rt is None or (type(rt) is int and 0 <= rt <= MAX_TOKENS))):
            raise RecordRefused(f"record {r.id!r}: token counts must be integers from 0 to {MAX_TOKENS}")
        if cost is not None and not (type(cost) is int and 0 <= cost <= MAX_COST_UNITS):
            raise RecordRefused(f"record {r.id!r}: cost {cost!r} is not an integer from 0 to {MAX_COST_UNITS} units")
        carry, units = (0, None) if cost is None else divmod(cost, CARRY)
        return (
            r.id, to_micros(r.start), r.tenant, r.endpoint, int(r.stream), r.code, r.outcome, r.upstream,
            r.end_user, r.model_requested, r.response_model, r.model, r.tier, i, cr, cw, o, rt,
            r.usage_source, ",".join(r.flags), r.price_model, r.price_tier,
            None if pef is None else to_micros(pef), units, r.duration_ms, r.ttft_ms,
            r.tag, r.workload, r.upstream_request_id, carry,
        )
    except (TypeError, ValueError, AttributeError, OverflowError) as e:
        raise RecordRefused(f"record {getattr(r, 'id', '?')!r} cannot be a ledger row: {e}") from e


def from_row(row: Sequence[Any]) -> Record:
    (id_, start, tenant, endpoint, stream, code, outcome, upstream, end_user, model_requested,
     response_model, model, tier, input_tokens, cache_read, cache_write, output_tokens, reasoning,
     usage_source, flags, price_model, price_tier, pef, cost_units, duration_ms, ttft_ms,
     tag, workload, upstream_request_id, carry) = row
    return Record(
        id=id_, start=from_micros(start), tenant=tenant, endpoint=endpoint, stream=bool(stream), code=code,
        outcome=outcome, upstream=upstream, end_user=end_user, model_requested=model_requested,
        response_model=response_model, model=model, tier=tier, input_tokens=input_tokens,
        cache_read_tokens=cache_read, cache_write_tokens=cache_write, output_tokens=output_tokens,
        reasoning_tokens=reasoning, usage_source=usage_source, flags=flags.split(",") if flags else [],
        price_model=price_model, price_tier=price_tier,
        price_effective_from=None if pef is None else from_micros(pef),
        cost_units=None if cost_units is None else int(carry) * CARRY + int(cost_units),
        duration_ms=duration_ms, ttft_ms=ttft_ms, tag=tag, workload=workload,
        upstream_request_id=upstream_request_id,
    )
