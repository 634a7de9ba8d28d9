"""What the ledger needs from a database, and the one place a URL picks the backend.

A backend has a migrate step, a per-thread writer that inserts batches idempotently on
the primary key, and read queries that stream. SQLite (sqlite.py) and PostgreSQL
(postgres.py) sit side by side behind the same two protocols.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from proxy.errors import LLMMeterError
from proxy.record import Record

# Database columns are the Record's fields, in declaration order.
COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Record))
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


class StoreUnavailable(LLMMeterError):
    """The database refused a write or read (locked, full, gone); the ledger retries."""


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
        """Apply pending numbered migrations; returns how many ran."""
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
METERED_SQL = "'chat', 'completions', 'embeddings', 'responses', 'messages'"
INPUT_SIDE = "(input_tokens + cache_read_tokens + cache_write_tokens)"
# The size bucket a request counts in (migration 003): the largest bound at or below its input side.
BUCKET_OF = f"SELECT MAX(lo) FROM input_side_bounds WHERE lo <= {INPUT_SIDE}"
HOURLY_SQL = f"""
SELECT start / 3600000000 AS hour,
       COALESCE(model, model_requested, '') AS model, CASE WHEN model IS NULL THEN 1 ELSE 0 END AS unpriced_model,
       COALESCE(tier, '') AS tier, upstream, tenant, COALESCE(tag, '') AS tag, COALESCE(workload, '') AS workload,
       CASE WHEN endpoint IN ({METERED_SQL}) THEN 1 ELSE 0 END AS metered,
       COUNT(*) AS requests,
       SUM(input_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(output_tokens),
       COALESCE(SUM(reasoning_tokens), 0),
       SUM(CASE WHEN usage_source = 'estimated' THEN 1 ELSE 0 END),
       SUM(CASE WHEN cost_units IS NULL AND outcome != 'rejected' AND endpoint IN ({METERED_SQL}) THEN 1 ELSE 0 END),
       COALESCE(SUM(cost_units), 0)
FROM requests WHERE {{where}}
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
"""
# The same rows from the rollup the 002 migration keeps: for ranges on whole UTC hours.
ROLLUP_SQL = """
SELECT hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered, requests,
       input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens,
       estimated, unpriced, cost_units
FROM hourly_rollup WHERE {where}
"""


def open_store(url: str, busy_timeout_s: float = 5.0) -> Store:
    """`sqlite:///rel.db`, `sqlite:////abs.db` or a plain path; or `postgresql://user@host/db`.

    Nothing connects here: a database that is down surfaces later, as StoreUnavailable.
    """
    if is_postgresql(url):
        from proxy.ledger.postgres import PostgresStore

        return PostgresStore(url, busy_timeout_s)
    from proxy.ledger.sqlite import SqliteStore

    return SqliteStore(sqlite_path(url), busy_timeout_s)


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
    """The Record as a row in COLUMNS order (kept in step with 001_init.sql)."""
    pef = r.price_effective_from
    return (
        r.id, to_micros(r.start), r.tenant, r.endpoint, int(r.stream), r.code, r.outcome, r.upstream,
        r.end_user, r.model_requested, r.response_model, r.model, r.tier,
        r.input_tokens, r.cache_read_tokens, r.cache_write_tokens, r.output_tokens, r.reasoning_tokens,
        r.usage_source, ",".join(r.flags), r.price_model, r.price_tier,
        None if pef is None else to_micros(pef), r.cost_units, r.duration_ms, r.ttft_ms,
        r.tag, r.workload, r.upstream_request_id,
    )


def from_row(row: Sequence[Any]) -> Record:
    (id_, start, tenant, endpoint, stream, code, outcome, upstream, end_user, model_requested,
     response_model, model, tier, input_tokens, cache_read, cache_write, output_tokens, reasoning,
     usage_source, flags, price_model, price_tier, pef, cost_units, duration_ms, ttft_ms,
     tag, workload, upstream_request_id) = row
    return Record(
        id=id_, start=from_micros(start), tenant=tenant, endpoint=endpoint, stream=bool(stream), code=code,
        outcome=outcome, upstream=upstream, end_user=end_user, model_requested=model_requested,
        response_model=response_model, model=model, tier=tier, input_tokens=input_tokens,
        cache_read_tokens=cache_read, cache_write_tokens=cache_write, output_tokens=output_tokens,
        reasoning_tokens=reasoning, usage_source=usage_source, flags=flags.split(",") if flags else [],
        price_model=price_model, price_tier=price_tier,
        price_effective_from=None if pef is None else from_micros(pef), cost_units=cost_units,
        duration_ms=duration_ms, ttft_ms=ttft_ms, tag=tag, workload=workload,
        upstream_request_id=upstream_request_id,
    )
