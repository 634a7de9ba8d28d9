"""Ledger rows by name: a Record as the `requests` table's columns, and the report's hourly sums.

The columns are named once (COLUMNS: the Record's fields and the cost's carry); a row goes
into the database as a dict of them and comes back as `sqlite3.Row` or psycopg's `dict_row`,
read by name, never by position.

Money never overflows and never turns into a float (migration 005). A record costs at most
MAX_COST_UNITS (5 x 10^19 + 10^18 units with fees, pricing/calculator.py), more than BIGINT holds, so it is
stored as `cost_units` (the cost modulo 10^18: the whole cost for any record under $100M)
plus `cost_carry` (the cost's multiples of 10^18). Sums are taken in two parts that each fit:
whole dollars (at most 5.1 x 10^9 per record) and the rest (under 10^10 per record); the
hourly rollup keeps them the same way (`cost_usd`, and `cost_units` below 10^10). So a SQL
sum over n records stays below 9.2 x 10^18 for n up to 9.2 x 10^8 records in one UTC hour
and attribution key, even with every record at the caps (tests/ledger/test_money_bounds.py);
SQLite's SUM() raises rather than overflow, its `+` is checked by a CHECK constraint, and
Python adds the parts together into one exact integer. Token counts are refused above
MAX_TOKENS (10^9) per field, so their sums fit for 9.2 x 10^9 records an hour.

Version 2 (migration 007) adds two more amounts per record, the fees inside the cost and the
cost the provider reported, each at most MAX_PART_UNITS (10^18 units, so one BIGINT with no
carry), summed in the same two parts (at most 10^8 dollars and under 10^10 units a record);
1-hour cache writes are a fifth token count under MAX_TOKENS and web search calls are at most
MAX_FEE_CALLS (10^5) a record. The band a record was priced at is part of the rollup's key.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from operator import itemgetter
from typing import Any, Protocol

from pricing.calculator import MAX_COST_UNITS, MAX_FEE_CALLS, MAX_PROVIDER_COST_UNITS, MAX_TOKENS, UNITS_PER_USD
from proxy.ledger.record import Record
from proxy.ledger.store.errors import RecordRefused, StoreUnavailable

# Database columns in the table's own order: the Record's fields in declaration order, with
# the cost's carry (005) before the fields migration 007 added after it.
_FIELDS = tuple(f.name for f in fields(Record))
_BEFORE_007 = _FIELDS.index("cache_write_1h_tokens")
COLUMNS: tuple[str, ...] = (*_FIELDS[:_BEFORE_007], "cost_carry", *_FIELDS[_BEFORE_007:])
CARRY = 10**18  # cost = cost_carry * CARRY + cost_units
HOUR_US = 3_600_000_000  # an hour in microseconds; rollups are keyed by start // HOUR_US
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
# Fees (a subset of the cost: MAX_FEE_CALLS calls at the dearest per-call price) and the
# provider's own cost are each at most 10^18 units a record: a BIGINT with no carry.
MAX_PART_UNITS = MAX_PROVIDER_COST_UNITS
# A request's duration and time to first token, in ms: never negative (a monotonic clock), and
# far below a BIGINT, so the report's differences and rates of them stay in range.
MAX_DURATION_MS = 10**12
# No record llmmeter makes starts before 2000 (a batch result's creation time is taken from 2000
# on, proxy/relay/batch.py) or after the present: each start's UTC month is a partition of
# requests on PostgreSQL, which every query over requests plans and locks, so a crafted journal
# segment with records in thousands of months would slow every later import (3,000 months: an
# import of one record took 3 s). A day ahead allows for clocks that disagree.
EARLIEST_START_US = 946_684_800_000_000  # 2000-01-01T00:00:00Z
LATEST_START_AHEAD_US = 86_400_000_000
MAX_BAND = 2**63 - 1  # a band's threshold is a key, never summed: anything BIGINT holds
values_of = itemgetter(*COLUMNS)  # a row dict's values in COLUMNS order, for positional parameters


class Row(Protocol):
    """A row read back by column name: `sqlite3.Row` or a psycopg `dict_row`."""

    def __getitem__(self, key: str, /) -> Any: ...


def to_row(r: Record) -> dict[str, Any]:
    """The Record as the `requests` row, by column name (every name in COLUMNS); RecordRefused for a
    value beyond the caps the ledger's sums are sized for, or one that is no row at all."""
    try:
        i, cr, cw, o, rt, cost = (r.input_tokens, r.cache_read_tokens, r.cache_write_tokens, r.output_tokens,
                                  r.reasoning_tokens, r.cost_units)
        # Spelled out, not a loop: this runs for every record on the importer thread.
        if not (type(i) is int and type(cr) is int and type(cw) is int and type(o) is int
                and 0 <= i <= MAX_TOKENS and 0 <= cr <= MAX_TOKENS and 0 <= cw <= MAX_TOKENS and 0 <= o <= MAX_TOKENS
                and (rt is None or (type(rt) is int and 0 <= rt <= MAX_TOKENS))):
            raise RecordRefused(f"record {r.id!r}: token counts must be integers from 0 to {MAX_TOKENS}")
        if cost is not None and not (type(cost) is int and 0 <= cost <= MAX_COST_UNITS):
            raise RecordRefused(f"record {r.id!r}: cost {cost!r} is not an integer from 0 to {MAX_COST_UNITS} units")
        w1h, calls, band, fee, provider = (r.cache_write_1h_tokens, r.web_search_calls, r.price_band, r.fee_units,
                                           r.provider_cost_units)
        if not (type(w1h) is int and 0 <= w1h <= MAX_TOKENS and type(calls) is int and 0 <= calls <= MAX_FEE_CALLS
                and (band is None or (type(band) is int and 0 <= band <= MAX_BAND))
                and (fee is None or (type(fee) is int and 0 <= fee <= MAX_PART_UNITS))
                and (provider is None or (type(provider) is int and 0 <= provider <= MAX_PART_UNITS))):
            raise RecordRefused(f"record {r.id!r}: 1-hour cache writes (0 to {MAX_TOKENS}), web search calls "
                                f"(0 to {MAX_FEE_CALLS}), price band (0 to {MAX_BAND}), fees and provider cost "
                                f"(0 to {MAX_PART_UNITS} units) must be integers in range")
        reserved = r.reserved_units
        if reserved is not None and not (type(reserved) is int and 0 <= reserved <= MAX_PART_UNITS):
            raise RecordRefused(f"record {r.id!r}: reservation {reserved!r} is not an integer from 0 to "
                                f"{MAX_PART_UNITS} units")
        d, ttft = r.duration_ms, r.ttft_ms
        if not (type(d) is int and 0 <= d <= MAX_DURATION_MS
                and (ttft is None or (type(ttft) is int and 0 <= ttft <= MAX_DURATION_MS))):
            raise RecordRefused(f"record {r.id!r}: duration_ms and ttft_ms must be integers from 0 to "
                                f"{MAX_DURATION_MS}")
        start = to_micros(r.start)
        if not EARLIEST_START_US <= start <= time.time_ns() // 1000 + LATEST_START_AHEAD_US:
            raise RecordRefused(f"record {r.id!r}: start {r.start} is before 2000 or after the present")
        n = r.request_count
        if not (type(n) is int and 1 <= n <= MAX_TOKENS):  # summed like a token count: the same cap keeps sums in range
            raise RecordRefused(f"record {r.id!r}: request_count {n!r} is not an integer from 1 to {MAX_TOKENS}")
        carry, units = (0, None) if cost is None else divmod(cost, CARRY)
        pef = r.price_effective_from
        row = vars(r).copy()  # the fields by name; a dataclass without slots keeps them in __dict__
        # One item at a time, not update(**...): this runs for every record on the importer thread.
        row["start"] = start
        row["stream"] = int(r.stream)
        row["flags"] = ",".join(r.flags)
        row["price_effective_from"] = None if pef is None else to_micros(pef)
        row["cost_units"] = units
        row["cost_carry"] = carry
        return row
    except (TypeError, ValueError, AttributeError, OverflowError) as e:
        raise RecordRefused(f"record {getattr(r, 'id', '?')!r} cannot be a ledger row: {e}") from e


def from_row(row: Row) -> Record:
    """A `requests` row, read by column name, as the Record it was made from."""
    # Keyed by the Record's own field names: a driver's column names are equal strings but not the
    # same objects, and keyword arguments match the same objects at once, others only by comparing.
    kw = {name: row[name] for name in _FIELDS}
    units, pef, flags = kw["cost_units"], kw["price_effective_from"], kw["flags"]
    kw["start"] = from_micros(kw["start"])
    kw["stream"] = bool(kw["stream"])
    kw["flags"] = flags.split(",") if flags else []
    kw["price_effective_from"] = None if pef is None else from_micros(pef)
    kw["cost_units"] = None if units is None else int(row["cost_carry"]) * CARRY + int(units)
    return Record(**kw)


@dataclass(frozen=True, slots=True)
class HourlyRow:
    """The report's sums for one UTC hour and attribution key (store.hourly_rows)."""

    hour: int  # UTC hours since the epoch
    model: str  # the canonical model, else the one requested, else ""
    unpriced_model: bool  # no price-table model was known
    tier: str
    upstream: str
    tenant: str
    tag: str
    workload: str
    metered: bool  # a metered endpoint (chat, completions, embeddings, responses, messages)
    requests: int
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    reasoning_tokens: int
    estimated: int  # requests whose usage was estimated
    unpriced: int  # metered requests with no price
    cost_units: int  # 10^-10 USD, exact
    # Version 2 (migration 007). Defaults keep rows made by hand (tests, what-ifs) short.
    price_band: int = 0  # the band's above_input_tokens; 0 below every band and for unpriced records
    cache_write_1h_tokens: int = 0
    web_search_calls: int = 0
    fee_units: int = 0  # the fees inside cost_units (a subset, never on top), 10^-10 USD, exact
    provider_cost_units: int = 0  # the cost the upstream reported, summed over provider_costed records
    provider_costed: int = 0  # requests that carried a provider cost (0: show none, not $0)

    @property
    def start(self) -> datetime:
        return _EPOCH + timedelta(hours=self.hour)

    @classmethod
    def from_sums(cls, row: Row) -> HourlyRow:
        """A row of HOURLY_SQL or ROLLUP_SQL: the cost's two parts (whole dollars, the rest) made
        one exact integer of units, every database number a Python int."""
        return cls(
            hour=exact(row["hour"]), model=row["model"], unpriced_model=bool(row["unpriced_model"]),
            tier=row["tier"], upstream=row["upstream"], tenant=row["tenant"], tag=row["tag"],
            workload=row["workload"], metered=bool(row["metered"]), requests=exact(row["requests"]),
            input_tokens=exact(row["input_tokens"]), cache_read_tokens=exact(row["cache_read_tokens"]),
            cache_write_tokens=exact(row["cache_write_tokens"]), output_tokens=exact(row["output_tokens"]),
            reasoning_tokens=exact(row["reasoning_tokens"]), estimated=exact(row["estimated"]),
            unpriced=exact(row["unpriced"]),
            cost_units=money(row["cost_usd"], row["cost_rest"]),
            price_band=exact(row["price_band"]), cache_write_1h_tokens=exact(row["cache_write_1h_tokens"]),
            web_search_calls=exact(row["web_search_calls"]), fee_units=money(row["fee_usd"], row["fee_rest"]),
            provider_cost_units=money(row["provider_cost_usd"], row["provider_cost_rest"]),
            provider_costed=exact(row["provider_costed"]),
        )

    @classmethod
    def from_grouped(cls, row: Row, split: int) -> HourlyRow:
        """A row of grouped_sql (proxy/ledger/store/sql.py): each sum from its two parts (`<name>_hi`
        times `split` plus `<name>_lo`), then as from_sums reads it."""
        sums: dict[str, Any] = {k: row[k] for k in _KEYS}
        for name, as_named in _GROUPED_NAMES.items():
            sums[as_named] = exact(row[f"{name}_hi"]) * split + exact(row[f"{name}_lo"])
        return cls.from_sums(sums)

    def as_tuple(self) -> tuple[Any, ...]:
        """The positional shape `Store.hourly` has always returned (0/1 for the two flags), with
        version 2's sums appended in field order."""
        return (self.hour, self.model, int(self.unpriced_model), self.tier, self.upstream, self.tenant, self.tag,
                self.workload, int(self.metered), self.requests, self.input_tokens, self.cache_read_tokens,
                self.cache_write_tokens, self.output_tokens, self.reasoning_tokens, self.estimated, self.unpriced,
                self.cost_units, self.price_band, self.cache_write_1h_tokens, self.web_search_calls, self.fee_units,
                self.provider_cost_units, self.provider_costed)


_KEYS = ("hour", "model", "unpriced_model", "tier", "upstream", "tenant", "tag", "workload", "metered", "price_band")
# The rollup's summed columns by the names from_sums reads (the rollup's cost_units is the rest below a dollar).
_GROUPED_NAMES = {"requests": "requests", "input_tokens": "input_tokens", "cache_read_tokens": "cache_read_tokens",
                  "cache_write_tokens": "cache_write_tokens", "output_tokens": "output_tokens",
                  "reasoning_tokens": "reasoning_tokens", "estimated": "estimated", "unpriced": "unpriced",
                  "cost_usd": "cost_usd", "cost_units": "cost_rest", "cache_write_1h_tokens": "cache_write_1h_tokens",
                  "web_search_calls": "web_search_calls", "fee_usd": "fee_usd", "fee_units": "fee_rest",
                  "provider_cost_usd": "provider_cost_usd", "provider_cost_units": "provider_cost_rest",
                  "provider_costed": "provider_costed"}
_BLANK: dict[str, Any] = {"hour": 0, "model": "", "unpriced_model": False, "tier": "", "upstream": "", "tenant": "",
                          "tag": "", "workload": "", "metered": False, "price_band": 0}
_SUMMED = tuple(f.name for f in fields(HourlyRow) if f.name not in _BLANK)


def fold(rows: Iterable[HourlyRow], keys: tuple[str, ...]) -> list[HourlyRow]:
    """Rows added up per value of `keys`, the other keys blank (0, "" or False), as grouped_sql
    reads them: how the range's partial hours join the rollup's grouped rows."""
    blank = {k: v for k, v in _BLANK.items() if k not in keys}
    out: dict[tuple[Any, ...], HourlyRow] = {}
    for row in rows:
        row = replace(row, **blank)
        key = tuple(getattr(row, k) for k in _KEYS)
        have = out.get(key)
        out[key] = row if have is None else replace(have, **{f: getattr(have, f) + getattr(row, f) for f in _SUMMED})
    return list(out.values())


@dataclass(frozen=True, slots=True)
class SpeedRow:
    """How fast one model and tier answered (store.speed): streamed metered requests with the
    upstream's own usage and a time to first token, over a range."""

    model: str  # the canonical model, else the one requested, else ""
    tier: str
    requests: int
    output_tokens_per_s_p50: float  # output tokens / (duration - ttft), in 0.01 token/s, its histogram bucket's;
    #                                 0.0 when no request ran past its first token
    ttft_ms_p50: int
    ttft_ms_p95: int


def money(usd: Any, rest: Any) -> int:
    """Units from a sum taken in two parts: whole dollars and the units below them."""
    return exact(usd) * UNITS_PER_USD + exact(rest)


def exact(v: Any) -> int:
    """A database integer or sum as a Python int. PostgreSQL sums BIGINT as NUMERIC; a float
    would mean a sum went inexact: refused."""
    if isinstance(v, float):
        raise StoreUnavailable(f"the ledger returned an inexact number {v!r} where sums must be integers")
    if isinstance(v, Decimal | int):
        return int(v)
    raise StoreUnavailable(f"the ledger returned {v!r} where an integer belongs")


def to_micros(t: datetime) -> int:
    """Exact integer microseconds since the epoch; a naive time is taken as UTC."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return (t - _EPOCH) // _US


def from_micros(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def whole_hours(lo: int, hi: int) -> tuple[int, int]:
    """The whole UTC hours inside [lo, hi) microseconds, as [first, last); (hi, hi) if none.

    Rollups answer for those; the partial hours before and after (zones with half-hour
    offsets) are summed from the requests."""
    first, last = -(-lo // HOUR_US) * HOUR_US, hi // HOUR_US * HOUR_US
    return (first, last) if first < last else (hi, hi)
