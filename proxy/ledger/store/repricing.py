"""The store's side of `llmmeter reprice` (proxy/ledger/reprice.py): which records to look at,
writing their new prices, and keeping the hourly rollup equal to the requests.

Records are read in (start, id) order, a chunk at a time, so a month never sits in memory.
With `--apply` each chunk is one transaction that holds the ledger's write lock (SQLite's
write lock, PostgreSQL's SHARE ROW EXCLUSIVE lock on `requests`, which every insert
conflicts with): imports wait for it, so no record lands in a rollup row while the
repricing moves it. In the same transaction the rollup is moved from each record as it was
to the record as it is now (Repricing.adjust: exact, and as quick in a busy hour as in a
quiet one); an hour whose rollup is not the sum of its requests is summed again from them
(Repricing.resum). The speed histogram (migration 015) is keyed by model and tier and moves
with them; the size histogram is left alone: repricing changes no token count.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Protocol

from pricing.calculator import UNITS_PER_USD
from proxy.ledger.record import Record
from proxy.ledger.store.histograms import DAY_HOURS, add_sql, speed_values
from proxy.ledger.store.rows import HOUR_US, HourlyRow, Row, from_row, to_micros, to_row
from proxy.ledger.store.sql import HOURLY_SQL, METERED_SQL, ROLLUP_SQL, SELECT_ROWS
from proxy.ledger.store.uncertain import add_uncertain_sql, uncertain_values
from proxy.protocol.names import BILLED

# A record that a repricing priced although it was unpriced when written: `--only-unpriced`
# keeps looking at it (a later table may price it better), as at any record with no cost.
PRICED_LATER = "priced_later"
REPRICED = "repriced"  # any record whose price a repricing changed

# The columns a repricing may change; nothing else of a record is ever written again.
_PRICE_COLUMNS = ("model", "tier", "flags", "price_model", "price_tier", "price_effective_from", "cost_units",
                  "cost_carry", "fee_units", "price_band")
_ROLLUP_COLUMNS = ("hour", "model", "unpriced_model", "tier", "upstream", "tenant", "tag", "workload", "metered",
                   "price_band", "requests", "input_tokens", "cache_read_tokens", "cache_write_tokens",
                   "output_tokens", "reasoning_tokens", "estimated", "unpriced", "cost_usd", "cost_units",
                   "cache_write_1h_tokens", "web_search_calls", "fee_usd", "fee_units", "provider_cost_usd",
                   "provider_cost_units", "provider_costed")


class Session(Protocol):
    """What a repricing needs of a locked transaction (the dialects' migration sessions have it)."""

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> None: ...

    def fetch(self, sql: str, params: tuple[object, ...] = ()) -> list[Row]: ...


def candidates_sql(mark: str, id_order: str, start_from: datetime, start_to: datetime,
                   after: tuple[int, str] | None, only_unpriced: bool, limit: int
                   ) -> tuple[str, tuple[object, ...]]:
    """The next `limit` billed records (metered endpoints and batch results, never a request
    llmmeter itself rejected) with start in [from, to), after the (start µs, id) `after`, in
    (start, id) order; with `only_unpriced` those with no cost or priced by a repricing."""
    m = mark
    where = f"start >= {m} AND start < {m} AND endpoint IN ({METERED_SQL}) AND outcome != 'rejected'"
    params: list[object] = [to_micros(start_from), to_micros(start_to)]
    if after is not None:
        where += f" AND (start > {m} OR (start = {m} AND {id_order} > {m}))"
        params += [after[0], after[0], after[1]]
    if only_unpriced:
        # The flag as a whole item of the comma-joined list; `\\` escapes LIKE's `_`.
        where += f" AND (cost_units IS NULL OR (',' || flags || ',') LIKE {m} ESCAPE '\\')"
        params.append("%," + PRICED_LATER.replace("_", "\\_") + ",%")
    sql = SELECT_ROWS.format(where=where, id=id_order) + f" LIMIT {int(limit)}"
    return sql, tuple(params)


class Repricing:
    """One chunk's locked transaction: read candidates, write new prices, sum their hours again."""

    def __init__(self, session: Session, mark: str, id_order: str) -> None:
        self.session, self.mark, self.id_order = session, mark, id_order

    def candidates(self, start_from: datetime, start_to: datetime, after: tuple[int, str] | None,
                   only_unpriced: bool, limit: int) -> list[Record]:
        sql, params = candidates_sql(self.mark, self.id_order, start_from, start_to, after, only_unpriced, limit)
        return [from_row(row) for row in self.session.fetch(sql, params)]

    def update(self, records: Sequence[Record]) -> set[int]:
        """Each record's price columns written (checked against the ledger's caps first, as an
        import checks them); returns the UTC hours (since the epoch) they start in. The speed
        histogram (migration 015) is keyed by model and tier, and the sums of unpriced and estimated
        requests (016) by model, tier and whether priced, all of which a repricing may change: the
        records' counts and sums are taken out as they were and put back as they are now."""
        m = self.mark
        sql = (f"UPDATE requests SET {', '.join(f'{c} = {m}' for c in _PRICE_COLUMNS)} WHERE id = {m}")
        hours: set[int] = set()
        rows = [to_row(r) for r in records]  # RecordRefused before anything is written
        if not rows:
            return hours
        ids = tuple(row["id"] for row in rows)
        where = f"id IN ({', '.join([m] * len(ids))})"
        moved = speed_values("requests", where)
        uncertain = uncertain_values("requests", where)
        self.session.execute(add_sql("speed_histogram", moved, sign="-"), ids * 2)
        self.session.execute(add_uncertain_sql(uncertain, sign="-"), ids)
        for row in rows:
            self.session.execute(sql, (*(row[c] for c in _PRICE_COLUMNS), row["id"]))
            hours.add(row["start"] // HOUR_US)
        self.session.execute(add_sql("speed_histogram", moved), ids * 2)
        self.session.execute(add_uncertain_sql(uncertain), ids)
        days = {h // DAY_HOURS * DAY_HOURS for h in hours}
        for span, at in sorted({(1, h) for h in hours} | {(DAY_HOURS, d) for d in days}):
            self.session.execute(f"DELETE FROM speed_histogram WHERE span = {m} AND hour = {m} AND requests = 0",
                                 (span, at))
        for hour in sorted(hours):
            self.session.execute(f"DELETE FROM uncertain_rollup WHERE hour = {m} AND requests = 0", (hour,))
        return hours

    def adjust(self, changes: Sequence[tuple[Record, Record]]) -> None:
        """The rollup moved from the records as they were to the records as they are now: each old
        record taken out of its row, each new one added to its own (the key holds the model, tier
        and band, which a repricing may change). Exact, and as fast for a busy hour as for a quiet
        one. An hour whose rollup cannot give back what its requests added (a row missing or short:
        it was not the sum of its requests) is summed again from the requests instead."""
        deltas: dict[tuple[object, ...], list[int]] = {}
        for old, new in changes:
            for rec, sign in ((old, -1), (new, 1)):
                vector = deltas.setdefault(_key(rec), [0] * len(_SUMS))
                for i, v in enumerate(_sums(rec)):
                    vector[i] += sign * v
        wrong: set[int] = set()
        for key, delta in sorted(deltas.items(), key=lambda kv: repr(kv[0])):  # one order: no deadlock
            if any(delta) and not self._move(key, delta):
                wrong.add(int(key[0]))  # type: ignore[call-overload]
        if wrong:
            self.resum(wrong)

    def _move(self, key: tuple[object, ...], delta: list[int]) -> bool:
        m = self.mark
        where = " AND ".join(f"{c} = {m}" for c in _KEY)
        found = self.session.fetch(ROLLUP_SQL.format(where=where), key)
        now = [0] * len(_SUMS) if not found else list(_sums_of(HourlyRow.from_sums(found[0])))
        after = [a + d for a, d in zip(now, delta, strict=True)]
        if any(v < 0 for v in after):
            return False
        if found:
            self.session.execute(f"DELETE FROM hourly_rollup WHERE {where}", key)
        if after[0]:  # requests: a row with none is no row
            self.session.execute(self._insert, (*key, *_stored(after)))
        return True

    @property
    def _insert(self) -> str:
        m = self.mark
        return (f"INSERT INTO hourly_rollup ({', '.join(_ROLLUP_COLUMNS)}) "
                f"VALUES ({', '.join([m] * len(_ROLLUP_COLUMNS))})")

    def resum(self, hours: Iterable[int]) -> None:
        """The rollup rows of these UTC hours made again from the requests they hold."""
        m = self.mark
        insert = self._insert
        for hour in sorted(hours):
            sums = [HourlyRow.from_sums(row) for row in self.session.fetch(
                HOURLY_SQL.format(where=f"start >= {m} AND start < {m}"), (hour * HOUR_US, (hour + 1) * HOUR_US))]
            self.session.execute(f"DELETE FROM hourly_rollup WHERE hour = {m}", (hour,))
            for s in sums:
                self.session.execute(insert, _rollup_values(s))


# The rollup's key, and the sums a record adds to its row, in _ROLLUP_COLUMNS order.
_KEY = _ROLLUP_COLUMNS[:10]
_SUMS = ("requests", "input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "reasoning_tokens",
         "estimated", "unpriced", "cost_units", "cache_write_1h_tokens", "web_search_calls", "fee_units",
         "provider_cost_units", "provider_costed")


def _key(r: Record) -> tuple[object, ...]:
    """The rollup row a record counts in, as HOURLY_SQL keys it."""
    model = r.model if r.model is not None else r.model_requested if r.model_requested is not None else ""
    return (to_micros(r.start) // HOUR_US, model, int(r.model is None), "" if r.tier is None else r.tier,
            r.upstream, r.tenant, "" if r.tag is None else r.tag, "" if r.workload is None else r.workload,
            int(r.endpoint in BILLED), r.price_band or 0)


def _sums(r: Record) -> tuple[int, ...]:
    """What one record adds to its row, as HOURLY_SQL sums it."""
    unpriced = int(r.cost_units is None and r.outcome != "rejected" and r.endpoint in BILLED)
    return (1, r.input_tokens, r.cache_read_tokens, r.cache_write_tokens, r.output_tokens, r.reasoning_tokens or 0,
            int(r.usage_source == "estimated"), unpriced, r.cost_units or 0, r.cache_write_1h_tokens,
            r.web_search_calls, r.fee_units or 0, r.provider_cost_units or 0, int(r.provider_cost_units is not None))


def _sums_of(s: HourlyRow) -> tuple[int, ...]:
    return (s.requests, s.input_tokens, s.cache_read_tokens, s.cache_write_tokens, s.output_tokens,
            s.reasoning_tokens, s.estimated, s.unpriced, s.cost_units, s.cache_write_1h_tokens, s.web_search_calls,
            s.fee_units, s.provider_cost_units, s.provider_costed)


def _stored(v: list[int]) -> tuple[int, ...]:
    """_SUMS as the rollup's value columns: money as whole dollars and the units below one."""
    (requests, inp, read, write, out, reasoning, estimated, unpriced, cost, write_1h, calls, fee, provider,
     costed) = v
    return (requests, inp, read, write, out, reasoning, estimated, unpriced, *divmod(cost, UNITS_PER_USD), write_1h,
            calls, *divmod(fee, UNITS_PER_USD), *divmod(provider, UNITS_PER_USD), costed)


def _rollup_values(s: HourlyRow) -> tuple[object, ...]:
    """A row of sums as the rollup keeps it: money as whole dollars and the units below one."""
    cost_usd, cost_rest = divmod(s.cost_units, UNITS_PER_USD)
    fee_usd, fee_rest = divmod(s.fee_units, UNITS_PER_USD)
    provider_usd, provider_rest = divmod(s.provider_cost_units, UNITS_PER_USD)
    return (s.hour, s.model, int(s.unpriced_model), s.tier, s.upstream, s.tenant, s.tag, s.workload, int(s.metered),
            s.price_band, s.requests, s.input_tokens, s.cache_read_tokens, s.cache_write_tokens, s.output_tokens,
            s.reasoning_tokens, s.estimated, s.unpriced, cost_usd, cost_rest, s.cache_write_1h_tokens,
            s.web_search_calls, fee_usd, fee_rest, provider_usd, provider_rest, s.provider_costed)
