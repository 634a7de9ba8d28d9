"""Retention: `llmmeter ledger prune` and `[ledger] keep_requests_months`, on both databases."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import psycopg
import pytest

from pricing import PriceBook, default_tables_dir, load_dir
from proxy.errors import ConfigError
from proxy.ledger.retention import MonthPruned, prune
from proxy.ledger.store import SqlStore, open_store
from proxy.report import ReportInput, build_report, render
from proxy.settings import SelfHost, load
from tests.fake_upstream import FakeUpstream
from tests.ledger.helpers import EVER, full_record, wait_until
from tests.ledger.test_replaced import CHAT, USAGE
from tests.serve import Served

NOW = datetime(2026, 12, 7, 4, 0, tzinfo=UTC)
SEP, OCT, NOV = (datetime(2026, m, 2, 10, 30, tzinfo=UTC) for m in (9, 10, 11))
BOOK = PriceBook(load_dir(default_tables_dir()))


def month(d: datetime) -> tuple[datetime, datetime]:
    following = (d.replace(day=1) + timedelta(days=32)).replace(day=1)
    return d.replace(day=1, hour=0, minute=0), following.replace(hour=0, minute=0)


def seeded(url: str) -> SqlStore:
    """A ledger with 3 requests in September, 4 in October and 5 in November 2026."""
    store = open_store(url)
    store.migrate()
    writer = store.writer()
    n = 0
    for start, count in ((SEP, 3), (OCT, 4), (NOV, 5)):
        writer.insert_many([full_record(n + i, start=start + timedelta(minutes=i), budget_leases=None)
                            for i in range(count)])
        n += count
    writer.close()
    return store


def counts(store: SqlStore) -> list[int]:
    return [store.count(*month(d), None) for d in (SEP, OCT, NOV)]


def rollup(store: SqlStore) -> list[object]:
    return sorted((dataclasses.astuple(r) for r in store.hourly_rows(*EVER, None)), key=repr)


def report_json(url: str, when: datetime) -> dict[str, object]:
    inp = ReportInput(month=f"{when:%Y-%m}", tz=ZoneInfo("UTC"), book=BOOK, selfhost=SelfHost(),
                      workload_bounds=(4096, 32768, 131072), now=NOW)
    out: dict[str, object] = json.loads(render(build_report(open_store(url, read_only=True), inp), "json"))
    return out


def test_a_dry_run_changes_nothing_and_apply_deletes_exactly_the_months_rows(db_url: str) -> None:
    store = seeded(db_url)
    before = rollup(store)
    dry = prune(store, "2026-11", apply=False, now=NOW)
    assert dry == [MonthPruned("2026-09", 3, False), MonthPruned("2026-10", 4, False)]
    assert counts(store) == [3, 4, 5] and rollup(store) == before and store.pruned_months(*EVER) == []
    done = prune(store, "2026-11", apply=True, now=NOW)
    assert done == dry
    assert counts(store) == [0, 0, 5] and store.count(*EVER, None) == 5
    assert rollup(store) == before  # the hourly rollups stay, to the last unit
    assert store.pruned_months(*EVER) == ["2026-09", "2026-10"]
    assert store.pruned_months(*month(NOV)) == []
    assert prune(store, "2026-11", apply=True, now=NOW) == []  # nothing left: nothing done


def test_the_report_of_a_pruned_month_gives_the_same_totals_and_says_what_is_unavailable(db_url: str) -> None:
    store = seeded(db_url)
    before = report_json(db_url, OCT)
    prune(store, "2026-11", apply=True, now=NOW)
    after = report_json(db_url, OCT)
    for key in ("totals", "by_model", "by_tag", "by_workload", "by_band", "daily", "what_if", "load_by_minute",
                "nodes"):
        assert after[key] == before[key], key
    assert [{k: v for k, v in t.items() if "_p" not in k} for t in after["by_tenant"]] == \
        [{k: v for k, v in t.items() if "_p" not in k} for t in before["by_tenant"]]
    assert "pruned_months" not in before
    # Percentiles, speed, slo and the uncertain requests' sums: kept apart, a prune leaves them (015, 016).
    for key in ("by_tenant", "speed", "slo", "unpriced_estimated"):
        assert after[key] == before[key], key
    assert after["pruned_months"] == {"months": ["2026-10"], "unavailable": []}
    assert "pruned_months" not in report_json(db_url, NOV)  # November's rows are all there


def test_the_current_month_and_later_ones_are_never_pruned(db_url: str) -> None:
    store = seeded(db_url)
    with pytest.raises(ConfigError, match="after the current month 2026-11"):
        prune(store, "2026-12", apply=True, now=NOV)
    with pytest.raises(ConfigError, match="use YYYY-MM"):
        prune(store, "2026-9x", apply=True, now=NOW)
    assert prune(store, "2026-11", apply=True, now=NOV)[-1].month == "2026-10"  # up to the month before
    assert counts(store) == [0, 0, 5]


def test_a_month_a_reprice_or_reconcile_holds_is_left_alone(db_url: str) -> None:
    store = seeded(db_url)
    reader = open_store(db_url, read_only=True)  # reconcile holds its month through a read-only store
    with reader.months_in_use(["2026-10"]):
        assert prune(store, "2026-11", apply=False, now=NOW)[1] == MonthPruned("2026-10", 4, True)
        done = prune(store, "2026-11", apply=True, now=NOW)
    assert done == [MonthPruned("2026-09", 3, False), MonthPruned("2026-10", 4, True)]
    assert counts(store) == [0, 4, 5] and store.pruned_months(*EVER) == ["2026-09"]
    assert prune(store, "2026-11", apply=True, now=NOW) == [MonthPruned("2026-10", 4, False)]  # let go: pruned
    assert counts(store) == [0, 0, 5]


def _send(served: Served, n: int) -> None:
    for _ in range(n):
        r = httpx.post(served.base_url + "/chat/completions", json=CHAT, headers=USAGE, timeout=60)
        assert r.status_code == 200, r.text


def test_the_command_prunes_while_serve_writes(db_url: str, fake: FakeUpstream,
                                               serve: Callable[..., Served]) -> None:
    store = seeded(db_url)
    before = rollup(store)
    served = serve(upstream=fake.base_url, db=db_url)
    _send(served, 3)
    dry = served.cli("ledger", "prune", "--before", "2026-11", "--db", db_url)
    assert dry.returncode == 0, dry.stderr
    assert "2026-09: would delete 3 per-request rows" in dry.stdout and "dry run: nothing deleted" in dry.stdout
    assert counts(store) == [3, 4, 5]
    done = served.cli("ledger", "prune", "--before", "2026-11", "--apply", "--db", db_url)
    _send(served, 3)  # serve goes on writing
    assert done.returncode == 0, done.stderr
    assert "2026-10: deleted 4 per-request rows; the hourly rollup stays" in done.stdout
    today = (datetime.now(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0), EVER[1])
    assert wait_until(lambda: store.count(*today, None) == 6)
    assert counts(store) == [0, 0, 5]
    assert [r for r in rollup(store) if r in before] == before  # the old months' hours as they were
    bad = served.cli("ledger", "prune", "--before", "2999-01", "--db", db_url)
    assert bad.returncode == 2 and "never pruned" in bad.stderr


def test_keep_requests_months_prunes_in_serve(db_url: str, fake: FakeUpstream,
                                             serve: Callable[..., Served]) -> None:
    store = seeded(db_url)
    before = rollup(store)
    now = datetime.now(UTC)
    served = serve(upstream=fake.base_url, db=db_url, config="[ledger]\nkeep_requests_months = 1\n")
    _send(served, 2)
    # Kept: the current month and the one before it; everything older goes at start.
    kept_from = (now.replace(day=1) - timedelta(days=1)).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    assert wait_until(lambda: store.count(EVER[0], kept_from, None) == 0)
    assert wait_until(lambda: store.count(now.replace(day=1, hour=0, minute=0, second=0, microsecond=0),
                                          EVER[1], None) == 2)
    assert [r for r in rollup(store) if r in before] == before
    assert "2026-09" in store.pruned_months(*EVER)


def test_keep_requests_months_must_be_a_whole_number_of_months(tmp_path: Path) -> None:
    path = tmp_path / "llmmeter.toml"
    path.write_text("[ledger]\nkeep_requests_months = 0\n")
    with pytest.raises(ConfigError, match="keep_requests_months"):
        load(path, env={})
    path.write_text("[ledger]\nkeep_requests_months = 6\n")
    assert load(path, env={}).keep_requests_months == 6


def test_prune_help_names_the_dry_run() -> None:
    r = subprocess.run([sys.executable, "-m", "proxy", "ledger", "prune", "--help"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "--apply" in r.stdout and "default: say what would be deleted" in r.stdout


def test_a_running_reprice_holds_its_month_and_a_prune_leaves_it_alone(pg_url: str, prices_dir: Path,
                                                                       tmp_path: Path) -> None:
    store = open_store(pg_url)
    store.migrate()
    writer = store.writer()
    # Priced at a cost the tables in force disagree with: the repricing has rows to write.
    writer.insert_many([full_record(i, start=OCT + timedelta(minutes=i), budget_leases=None, model="gpt-test",
                                    model_requested="gpt-test", response_model="gpt-test", tier="standard",
                                    price_model="gpt-test", price_tier="standard", cost_units=1, price_band=None)
                        for i in range(4)])
    writer.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMMETER_")}
    prune_cmd = [sys.executable, "-m", "proxy", "ledger", "prune", "--before", "2026-11", "--apply", "--db", pg_url]
    # An import in progress (this transaction's lock on requests) keeps the repricing waiting to write,
    # with its month held: the prune meets it there.
    with psycopg.connect(pg_url) as importing:
        importing.execute(b"LOCK TABLE requests IN SHARE ROW EXCLUSIVE MODE")
        reprice = subprocess.Popen([sys.executable, "-m", "proxy", "reprice", "--from", "2026-10-01", "--to",
                                    "2026-11-01", "--apply", "--db", pg_url, "--prices", str(prices_dir)],
                                   cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            assert wait_until(lambda: store.month_in_use("2026-10") or reprice.poll() is not None)
            assert reprice.poll() is None, reprice.communicate()[0]
            held = subprocess.run(prune_cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
            assert held.returncode == 1, held.stderr
            assert "2026-10: 4 rows, in use by a reprice or reconcile: left alone" in held.stdout
            assert store.count(*month(OCT), None) == 4
        finally:
            importing.rollback()
            out = reprice.communicate(timeout=60)[0]
    assert reprice.returncode == 0, out
    done = subprocess.run(prune_cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "2026-10: deleted 4 per-request rows" in done.stdout


def test_a_reconcile_waits_for_a_prune_of_its_month_in_progress(pg_url: str, tmp_path: Path) -> None:
    """reconcile takes its month's lock: while a prune holds the month, reconcile waits and reads
    no half-pruned month; when the prune lets go it reads the month whole."""
    store = seeded(pg_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMMETER_")}
    cmd = [sys.executable, "-m", "proxy", "reconcile", "--month", "2026-10", "--against", "provider_cost",
           "--format", "json", "--db", pg_url]

    def waiting_for_month_lock() -> bool:
        with psycopg.connect(pg_url) as con:
            row = con.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").fetchone()
            return bool(row and row[0])

    with store._month_claimed("2026-10") as free:  # what `ledger prune` holds while it deletes the month
        assert free
        reconciling = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True)
        try:
            assert wait_until(lambda: waiting_for_month_lock() or reconciling.poll() is not None)
            assert reconciling.poll() is None, reconciling.communicate()
        except BaseException:
            reconciling.kill()
            raise
    out, err = reconciling.communicate(timeout=60)
    assert reconciling.returncode in (0, 1), err
    assert json.loads(out)["month"] == "2026-10"
    assert counts(store) == [3, 4, 5]


def test_a_batch_result_of_a_pruned_month_is_not_billed_again(db_url: str) -> None:
    """A batch result's id comes from its batch and line: a second download brings the same id,
    and an Anthropic result's start is the download's time. Once the first one's month is pruned,
    neither the same id in that month nor at a later start is billed again, in rows or rollups;
    a chat request of that month that was never written is still kept (a late journal replay)."""
    store = seeded(db_url)
    writer = store.writer()
    first = [full_record(100 + i, id=f"batch-{i:032x}", endpoint="batch", start=SEP + timedelta(hours=1),
                         budget_leases=None) for i in range(3)]
    assert writer.insert_many(first) == 3
    sep_requests = _rollup_requests(store, SEP)
    [pruned] = prune(store, "2026-10", apply=True, now=NOW)
    assert (pruned.month, pruned.rows) == ("2026-09", 6)
    again = [dataclasses.replace(first[0]), dataclasses.replace(first[1], start=NOV + timedelta(hours=2))]
    late = full_record(200, start=SEP + timedelta(hours=3), budget_leases=None)
    assert writer.insert_many([*again, late]) == 1
    writer.close()
    assert store.count(*month(NOV), None) == 5 and store.count(*month(SEP), None) == 1
    assert _rollup_requests(store, SEP) == sep_requests + 1
    assert _rollup_requests(store, NOV) == 5


def _rollup_requests(store: SqlStore, d: datetime) -> int:
    return sum(row.requests for row in store.hourly_rows(*month(d), None))
