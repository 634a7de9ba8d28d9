"""A batch's results downloaded again after their month's per-request rows were pruned
(`llmmeter ledger prune`, `[ledger] keep_requests_months`) bill nothing again: the rows that
made a second download a no-op are gone, but the rollup still counts the first. From a real
SQLite ledger behind a running llmmeter and a real batch upstream."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from openai import OpenAI

from proxy.ledger.retention import prune
from proxy.ledger.store import open_store
from tests.batch import lines as wire
from tests.batch.test_sdk import OPENAI_FILE, batch_rows, rollup
from tests.batch.upstream import BatchUpstream
from tests.faults.helpers import wait_until

AFTER = datetime.fromtimestamp(wire.CREATED, UTC)
BEFORE = f"{AFTER.year + (AFTER.month == 12):04d}-{AFTER.month % 12 + 1:02d}"  # the month after the results'


def test_an_openai_batch_downloaded_again_after_its_month_was_pruned_bills_once(
        batch_upstream: BatchUpstream, meter_for: Any) -> None:
    batch_upstream.files["file-x"] = OPENAI_FILE
    proxy = meter_for(batch_upstream.url)
    client = OpenAI(base_url=proxy.base_url, api_key="sk-client", max_retries=0)
    client.files.content("file-x")
    assert len(batch_rows(proxy, expect=3)) == 2
    assert wait_until(lambda: rollup(proxy)[0] == 2)
    billed = rollup(proxy)
    [month] = prune(open_store(proxy.db_url), BEFORE, apply=True)
    assert (month.rows, month.in_use) == (2, False)  # the results' rows; the download's record is this month's
    client.files.content("file-x")  # by anyone: a tenant's download bills the batch's owner
    proxy.rows(expect=2)  # both downloads' own records, this month's
    assert rollup(proxy) == billed
