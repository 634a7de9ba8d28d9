"""Refusals before a key is known (SPEC "Version 4 additions"): counted in
llmmeter_refusals_total{reason}, and written to the ledger as at most one record per minute and
reason (flag `aggregated`, `request_count` = the refusals it stands for), never one per request."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.fake_upstream import FakeUpstream

KEY = "llmm-refusals-test-key"
TOKEN = "refusals-metrics-token"
CONFIG = (f'[server]\nmetrics_token = "{TOKEN}"\n'
          f'[[tenant]]\nname = "search-team"\nkey_sha256 = ["{hashlib.sha256(KEY.encode()).hexdigest()}"]\n')
CHAT = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hi"}]}


def refusals(proxy: Any) -> dict[str, float]:
    samples = proxy.metrics(headers={"authorization": f"Bearer {TOKEN}"})
    return {dict(labels)["reason"]: v for (name, labels), v in samples.items() if name == "llmmeter_refusals_total"}


def requests_total(proxy: Any, **labels: str) -> float:
    samples = proxy.metrics(headers={"authorization": f"Bearer {TOKEN}"})
    return sum(v for (name, lbls), v in samples.items()
               if name == "llmmeter_requests_total" and labels.items() <= dict(lbls).items())


def months(rows: list[dict[str, Any]]) -> set[str]:
    return {datetime.fromtimestamp(r["start"] / 1e6, UTC).strftime("%Y-%m") for r in rows}


def test_a_keyless_flood_is_counted_and_written_once_per_minute_and_reason(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url, config=CONFIG)
    with httpx.Client(base_url=proxy.base_url, timeout=10) as client:
        for i in range(1500):  # no key at all: half to a metered path with a body, half without one
            r = client.post("/chat/completions", json=CHAT) if i % 2 else client.get("/models")
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        for _ in range(500):
            r = client.get("/models", headers={"authorization": "Bearer not-a-key"})
            assert r.status_code == 401
    assert not fake.requests  # none of them went upstream
    assert refusals(proxy) == {"missing_key": 1500, "unknown_key": 500}
    assert requests_total(proxy, code="401", outcome="rejected") == 2000
    proxy.stop()  # what the open minute counted is written at shutdown

    rows = proxy.rows()
    # One record per minute and reason: the flood spans a minute boundary at most a few times.
    assert 2 <= len(rows) <= 6, [(r["start"], r["flags"], r["request_count"]) for r in rows]
    for r in rows:
        assert (r["tenant"], r["code"], r["outcome"], r["endpoint"]) == ("unauthenticated", 401, "rejected", "other")
        assert r["start"] % 60_000_000 == 0  # the start of its UTC minute
    by_reason: dict[str, int] = {}
    for r in rows:
        flag, reason = r["flags"].split(",")
        assert flag == "aggregated"
        by_reason[reason] = by_reason.get(reason, 0) + r["request_count"]
    assert by_reason == {"missing_key": 1500, "unknown_key": 500}

    # Reports and exports count what each record stands for.
    reported = 0
    for month in sorted(months(rows)):
        out = proxy.cli("report", "--month", month, "--format", "json", "--db", proxy.db_url)
        assert out.returncode == 0, out.stderr
        reported += json.loads(out.stdout)["totals"]["requests"]
    assert reported == 2000
    first = datetime.fromtimestamp(rows[0]["start"] / 1e6, UTC).date()
    exported = proxy.cli("export", "--from", first.isoformat(), "--to", (first + timedelta(days=2)).isoformat(),
                         "--format", "jsonl", "--db", proxy.db_url)
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert len(lines) == len(rows) and sum(x["request_count"] for x in lines) == 2000
    assert {x["flags"].split("|")[0] for x in lines} == {"aggregated"}


def test_refusals_after_a_key_is_known_stay_one_record_each(fake: FakeUpstream, serve: Any) -> None:
    """A tenant's own request that is refused (here: an unrouted model, 404) is no keyless refusal:
    one record of its own, as before, and no refusal counted."""
    config = CONFIG + '[[upstream]]\nname = "only"\nbase_url = "' + fake.base_url + '"\nmodels = ["kimi-*"]\n'
    proxy = serve(config=config)
    with httpx.Client(base_url=proxy.base_url, timeout=10, headers={"authorization": f"Bearer {KEY}"}) as client:
        for _ in range(3):
            assert client.post("/chat/completions", json={**CHAT, "model": "nope"}).status_code == 404
    assert refusals(proxy) == {"missing_key": 0, "unknown_key": 0}
    rows = proxy.rows(expect=3)
    assert [(r["tenant"], r["code"], r["outcome"], r["request_count"]) for r in rows] == [
        ("search-team", 404, "rejected", 1)] * 3
    assert not any("aggregated" in r["flags"] for r in rows)


def test_keyless_requests_are_labelled_unauthenticated_on_metrics(fake: FakeUpstream, serve: Any) -> None:
    """docs/tenants.md reserves `unauthenticated` for requests without a valid key: that is their
    tenant label on /metrics, as in the ledger, whatever tenant header they send (no new series)."""
    proxy = serve(upstream=fake.base_url, config=CONFIG)
    for i in range(4):  # a connection each: llmmeter closes one after a 401 to an unread body
        headers = {"x-llmmeter-tenant": f"made-up-{i}"} | ({"authorization": "Bearer nope"} if i % 2 else {})
        r = httpx.post(proxy.base_url + "/chat/completions", json=CHAT, headers=headers, timeout=10)
        assert r.status_code == 401
    assert requests_total(proxy, tenant="unauthenticated", code="401", outcome="rejected") == 4
    samples = proxy.metrics(headers={"authorization": f"Bearer {TOKEN}"})
    tenants = {dict(lbls).get("tenant") for (name, lbls), v in samples.items() if name == "llmmeter_requests_total"}
    assert tenants == {"unauthenticated"}
