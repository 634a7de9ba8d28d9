"""Migration 015's histograms and 016's sums of unpriced and estimated requests hold what the
requests say, counted here in Python from the records themselves, after every write path
(insert_many with a replay, the importer, adopt, a batch's results, repricing, a prune) and
after the migrations' backfill of an existing ledger, on SQLite and PostgreSQL; and the
report's figures read from them are within the stated bucket error (histograms.ERROR) of
exact nearest-rank percentiles."""

from __future__ import annotations

import random
import sqlite3
from bisect import bisect_right
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import psycopg

from proxy.ledger import Ledger
from proxy.ledger.migrations import load
from proxy.ledger.record import Record
from proxy.ledger.retention import prune
from proxy.ledger.store import is_postgresql, open_store, sqlite_path
from proxy.ledger.store.histograms import BOUNDS, ERROR
from proxy.ledger.store.rows import to_micros
from proxy.ledger.store.unpriced_report import uncertain_rows
from proxy.report.build import month_range
from tests.ledger.helpers import EVER, full_record
from tests.ledger.test_journal_binding import left_behind
from tests.ledger.test_prune import report_json

OCTOBER = datetime(2026, 10, 1, tzinfo=UTC)
BILLED = ("batch", "chat", "completions", "embeddings", "messages", "responses")


def traffic(n: int = 600, seed: int = 5, prefix: str = "h") -> list[Record]:
    """Streams and not, timed and not, three models (one unpriced), both tiers and every band,
    metered endpoints and not, over October and November."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ttft = rng.choice((None, rng.randrange(0, 64), rng.randrange(64, 90_000)))
        side = rng.choice((rng.randrange(0, 40_000), rng.randrange(32_000, 140_000), rng.randrange(10**6)))
        out.append(full_record(
            i, id=f"{prefix}-{i:06d}", start=OCTOBER + timedelta(seconds=rng.randrange(61 * 86400)),
            tenant=rng.choice(("a", "b", "c")), model=rng.choice(("m1", "m2", None)), model_requested="asked",
            tier=rng.choice(("standard", "highspeed", None)), stream=rng.random() < 0.8,
            usage_source=rng.choice(("upstream", "upstream", "estimated")), ttft_ms=ttft,
            duration_ms=(ttft or 0) + rng.choice((0, rng.randrange(1, 100_000))),
            input_tokens=side, cache_read_tokens=0, cache_write_tokens=0, cache_write_1h_tokens=0,
            output_tokens=rng.randrange(0, 10**5), endpoint=rng.choice(("chat", "chat", "batch", "models")),
            cost_units=rng.choice((None, 10**9 + i, 3 * 10**12 + i)), outcome=rng.choice(("ok", "ok", "rejected"))))
    return out


def bucket(value: int) -> int:
    return BOUNDS[bisect_right(BOUNDS, value) - 1] if value >= 0 else 0


Tables = tuple[Counter[tuple[object, ...]], Counter[tuple[object, ...]], dict[tuple[object, ...], tuple[int, ...]]]


def expected(records: list[Record]) -> Tables:
    """Each table's rows, counted from the records: the histograms per hour (span 1) and per day
    (span 24), the uncertain requests' sums per hour (money as one exact integer)."""
    speed: Counter[tuple[object, ...]] = Counter()
    size: Counter[tuple[object, ...]] = Counter()
    uncertain: dict[tuple[object, ...], tuple[int, ...]] = {}
    for r in records:
        hour = int((r.start - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) // 3600
        unpriced = r.cost_units is None and r.outcome != "rejected" and r.endpoint in BILLED
        if unpriced or r.usage_source == "estimated":
            key = (hour, r.tenant, r.model or r.model_requested or "", int(r.model is None), r.tier or "", r.upstream,
                   int(unpriced), int(r.usage_source == "estimated"))
            adds = (1, r.input_tokens, r.cache_read_tokens, r.cache_write_tokens, r.cache_write_1h_tokens,
                    r.output_tokens, r.web_search_calls, r.cost_units or 0)
            uncertain[key] = tuple(a + b for a, b in zip(uncertain.get(key, (0,) * 8), adds, strict=True))
        if r.endpoint not in BILLED:
            continue
        side = r.input_side_tokens
        for span in (1, 24):
            at = hour // span * span
            size[(span, at, r.tenant, bucket(side))] += 1
            if r.stream and r.usage_source == "upstream" and r.ttft_ms is not None:
                key = (span, at, r.tenant, r.model or r.model_requested or "", r.tier or "",
                       0 if side < 32768 else 1 if side < 131072 else 2)
                speed[(*key, 0, bucket(r.ttft_ms))] += 1
                if r.duration_ms > r.ttft_ms:
                    speed[(*key, 1, bucket(r.output_tokens * 100_000 // (r.duration_ms - r.ttft_ms)))] += 1
    return speed, size, uncertain


def tables(url: str) -> Tables:
    speed = "SELECT span, hour, tenant, model, tier, band, measure, bucket, requests FROM speed_histogram"
    size = "SELECT span, hour, tenant, bucket, requests FROM size_histogram"
    got = []
    for sql in (speed, size):
        rows = _query(url, sql)
        got.append(Counter({tuple(row[:-1]): row[-1] for row in rows if row[-1]}))
        assert all(row[-1] >= 0 for row in rows)
    uncertain = {}
    for row in _query(url, "SELECT hour, tenant, model, unpriced_model, tier, upstream, unpriced, estimated, requests, "
                           "input_tokens, cache_read_tokens, cache_write_tokens, cache_write_1h_tokens, output_tokens, "
                           "web_search_calls, cost_usd, cost_rest FROM uncertain_rollup"):
        assert row[8] >= 0
        if row[8]:
            money = int(str(row[15])) * 10**10 + int(str(row[16]))
            uncertain[tuple(row[:8])] = (*(int(str(v)) for v in row[8:15]), money)
    return got[0], got[1], uncertain


def _query(url: str, sql: str) -> list[tuple[object, ...]]:
    if is_postgresql(url):
        with psycopg.connect(url) as pg:
            return [tuple(r) for r in pg.execute(sql.encode()).fetchall()]
    con = sqlite3.connect(sqlite_path(url))
    try:
        return [tuple(r) for r in con.execute(sql).fetchall()]
    finally:
        con.close()


def _execute(url: str, *statements: str) -> None:
    if is_postgresql(url):
        with psycopg.connect(url, autocommit=True) as pg:
            for s in statements:
                pg.execute(s.encode())
        return
    con = sqlite3.connect(sqlite_path(url), isolation_level=None)
    try:
        for s in statements:
            con.execute(s)
    finally:
        con.close()


def written(url: str, records: list[Record], size: int = 97) -> None:
    store = open_store(url)
    store.migrate()
    writer = store.writer()
    try:
        for at in range(0, len(records), size):
            writer.insert_many(records[at:at + size])
    finally:
        writer.close()


def test_insert_many_keeps_both_histograms_and_a_replay_adds_nothing(db_url: str) -> None:
    records = traffic()
    written(db_url, records)
    writer = open_store(db_url).writer()
    try:
        assert writer.insert_many(records[:250]) == 0
    finally:
        writer.close()
    assert tables(db_url) == expected(records)
    # The bounds the database buckets by are the ones the figures are read with.
    assert [row[0] for row in _query(db_url, "SELECT lo FROM histogram_bounds ORDER BY lo")] == list(BOUNDS)


def test_the_importer_and_adopt_keep_the_histograms(db_url: str, tmp_path: Path, ledgers: list[Ledger]) -> None:
    records = traffic(seed=9)
    journal = tmp_path / "journal"
    ledger = Ledger(db_url, journal, batch_size=53)
    ledgers.append(ledger)
    ledger.start()
    ledger.append_many(records[:400])
    assert ledger.flush(60) and ledger.rejected == 0
    assert tables(db_url) == expected(records[:400])
    # Another ledger's segment, set aside in foreign/, adopted: its new records only, once.
    segment = left_behind(journal, "0" * 32, records[300:])
    (journal / "foreign").mkdir(exist_ok=True)
    segment.rename(journal / "foreign" / segment.name)
    stats = ledger.adopt()
    assert stats.inserted == len(records) - 400
    assert tables(db_url) == expected(records)


def test_repricing_moves_the_speed_counts_with_the_model_and_tier(db_url: str) -> None:
    records = traffic(seed=13)
    written(db_url, records)
    store = open_store(db_url)
    with store.repricing() as r:
        found = r.candidates(*EVER, None, False, 200)
        for rec in found:
            rec.model, rec.tier = "m3", "flex"  # as a later price table could resolve them
            rec.cost_units = 7 if rec.cost_units is None else rec.cost_units
        r.update(found)
    now = list(store.query(*EVER, None))
    assert sum(rec.model == "m3" for rec in now) == 200
    assert tables(db_url) == expected(now)


def test_a_prune_leaves_the_histograms_the_sums_and_the_figures(db_url: str) -> None:
    records = traffic(seed=17)
    written(db_url, records)
    store = open_store(db_url)
    october = (OCTOBER, datetime(2026, 11, 1, tzinfo=UTC))
    lo_hi = (to_micros(october[0]), to_micros(october[1]))
    before = (store.speed(*october), store.slo(*october, None), store.input_side_percentiles(*october, None, (50, 95)),
              sorted(uncertain_rows(store, *lo_hi), key=repr))
    assert before[0] and before[2] and before[3]
    done = prune(store, "2026-11", apply=True, now=datetime(2026, 12, 5, tzinfo=UTC))
    assert [m.month for m in done] == ["2026-10"] and store.count(*october, None) == 0
    assert tables(db_url) == expected(records)
    assert (store.speed(*october), store.slo(*october, None), store.input_side_percentiles(*october, None, (50, 95)),
            sorted(uncertain_rows(store, *lo_hi), key=repr)) == before


def test_migrations_015_and_016_fill_the_tables_from_the_rows_a_ledger_has(db_url: str) -> None:
    records = traffic(seed=21)
    written(db_url, records[:500])
    _before_015(db_url)
    _execute(db_url, "INSERT INTO pruned_months (month, pruned_at, requests) VALUES ('2026-09', 1, 5)")
    store = open_store(db_url)
    assert store.migrate() == 3  # 015, 016 and 017
    assert tables(db_url) == expected(records[:500])
    written(db_url, records)  # the writers keep them from there
    assert tables(db_url) == expected(records)
    # A month pruned before the histograms existed: its deleted requests were never counted,
    # so the figures that would need them are left out, not given short.
    september = (datetime(2026, 9, 1, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC))
    assert store.speed(*september) == [] and store.input_side_percentiles(*september, None, (50,)) == {}
    assert uncertain_rows(store, to_micros(september[0]), to_micros(september[1])) == []
    # The report says which figures it leaves out, and only for such a month.
    assert report_json(db_url, datetime(2026, 9, 5, tzinfo=UTC))["pruned_months"] == {
        "months": ["2026-09"], "unavailable": ["by_tenant.input_tokens_p50", "by_tenant.input_tokens_p95", "speed",
                                               "slo", "unpriced_estimated"]}
    assert "pruned_months" not in report_json(db_url, datetime(2026, 10, 5, tzinfo=UTC))
    assert store.speed(OCTOBER, datetime(2026, 11, 1, tzinfo=UTC))


def test_figures_are_within_the_bucket_error_in_a_half_hour_zone(db_url: str) -> None:
    records = traffic(n=3000, seed=29)
    written(db_url, records)
    store = open_store(db_url, read_only=True)
    for tz in ("Asia/Kolkata", "America/Sao_Paulo", "UTC"):
        lo, hi = month_range("2026-11", ZoneInfo(tz))
        inside = [r for r in records if lo <= r.start < hi and r.endpoint in BILLED]
        for tenant in (None, "b"):
            mine = [r for r in inside if tenant is None or r.tenant == tenant]
            got = store.input_side_percentiles(lo, hi, tenant, (50, 95))
            for t in {r.tenant for r in mine}:
                sides = [r.input_side_tokens for r in mine if r.tenant == t]
                for figure, p in zip(got[t], (50, 95), strict=True):
                    _close(figure, _rank(sides, p))
            timed = [r for r in mine if r.stream and r.usage_source == "upstream" and r.ttft_ms is not None]
            for row in store.speed(lo, hi, tenant):
                rs = [r for r in timed if (r.model or r.model_requested, r.tier or "") == (row.model, row.tier)]
                assert row.requests == len(rs)
                _close(row.ttft_ms_p50, _rank([r.ttft_ms or 0 for r in rs], 50))
                _close(row.ttft_ms_p95, _rank([r.ttft_ms or 0 for r in rs], 95))
                rates = [r.output_tokens * 100_000 // (r.duration_ms - (r.ttft_ms or 0)) for r in rs
                         if r.duration_ms > (r.ttft_ms or 0)]
                _close(round(row.output_tokens_per_s_p50 * 100), _rank(rates, 50) if rates else 0)
            assert sum(row.requests for row in store.speed(lo, hi, tenant)) == len(timed)


def _rank(values: list[int], p: int) -> int:
    ordered = sorted(values)
    return ordered[(len(ordered) * p + 99) // 100 - 1]


def _close(figure: int, exact: int) -> None:
    assert abs(figure - exact) <= ERROR * exact, (figure, exact)
    if exact < 64:
        assert figure == exact


def _before_015(url: str) -> None:
    """The ledger as an llmmeter before migrations 015-017 left it (its rows stay)."""
    common = ("DROP TABLE uncertain_rollup", "DROP TABLE speed_histogram", "DROP TABLE size_histogram",
              "DROP TABLE histogram_bounds",
              "ALTER TABLE pruned_months DROP COLUMN before_histograms",
              "DROP TABLE pruned_batch_ids", "DELETE FROM schema_migrations WHERE version >= 15")
    if is_postgresql(url):
        _execute(url, "DROP TRIGGER requests_uncertain_rollup ON requests", "DROP FUNCTION requests_uncertain_rollup()",
                 "DROP TRIGGER requests_speed_histogram ON requests",
                 "DROP TRIGGER requests_size_histogram ON requests", "DROP FUNCTION requests_speed_histogram()",
                 "DROP FUNCTION requests_size_histogram()", *common)
        _execute(url, next(m.sql for m in load("postgresql") if m.version == 3))
        return
    _execute(url, *common, "CREATE TABLE input_side_bounds (lo INTEGER PRIMARY KEY)",
             "CREATE TABLE input_side_histogram (hour BIGINT NOT NULL, tenant TEXT NOT NULL, bucket BIGINT NOT NULL, "
             "requests BIGINT NOT NULL, PRIMARY KEY (hour, tenant, bucket))")


