"""`llmmeter reconcile --against openai|anthropic` against a local server answering the documented pages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.cli import main
from tests.reconcile.conftest import KEY, FakeProvider, fixture, seed, write_config
from tests.reconcile.records import anthropic_records, openai_records

OPENAI_ROUTES = {"/v1/organization/usage/completions": [fixture("openai_usage_page1.json"),
                                                        fixture("openai_usage_page2.json")],
                 "/v1/organization/costs": [fixture("openai_costs.json")]}
ANTHROPIC_ROUTES = {"/v1/organizations/usage_report/messages": [fixture("anthropic_usage_page1.json"),
                                                                fixture("anthropic_usage_page2.json")],
                    "/v1/organizations/cost_report": [fixture("anthropic_cost.json")]}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["reconcile", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def rows(doc: dict[str, Any]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    return {(r["date"], r["scope"], r["model"], r["tier"]): r for r in doc["rows"]}


@pytest.fixture
def openai_setup(tmp_path: Path, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> Path:
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    seed(db, openai_records())
    provider.routes = dict(OPENAI_ROUTES)
    monkeypatch.setenv("TEST_OPENAI_ADMIN", KEY)
    return write_config(tmp_path / "llmmeter.toml", db, provider.url, openai='upstreams = ["openai"]')


def test_openai_pages_followed_and_compared(openai_setup: Path, provider: FakeProvider,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--month", "2026-11", "--against", "openai", "--config", str(openai_setup),
                       "--format", "json", "--threshold-pct", "0")
    assert code == 1  # a model only in the ledger, a day only at the provider
    usage = [s for s in provider.seen if s.path.endswith("/usage/completions")]
    assert len(usage) == 2 and dict(usage[1].query)["page"] == "page_AAAAAGdGxdEiJdKOAAAAAGcqsYA="
    q = usage[0].query
    assert ("bucket_width", "1d") in q and ("limit", "31") in q
    assert {v for k, v in q if k == "group_by"} == {"model", "service_tier", "batch"}
    assert dict(q)["start_time"] == "1793491200" and dict(q)["end_time"] == "1796083200"  # 2026-11-01, 12-01
    assert all(s.headers["authorization"] == f"Bearer {KEY}" for s in provider.seen)
    costs = [s for s in provider.seen if s.path.endswith("/costs")]
    assert [v for k, v in costs[0].query if k == "group_by"] == ["line_item"]

    doc = json.loads(out)
    r = rows(doc)
    gpt4o = r[("2026-11-03", "model", "gpt-4o-2024-08-06", "standard")]
    assert gpt4o["llmmeter"] == {"input_tokens": 1400, "cache_read_tokens": 600, "cache_write_tokens": 0,
                                 "output_tokens": 500, "cost_usd": "2"}
    assert gpt4o["provider"]["input_tokens"] == 1400  # 2000 - 600 cached
    assert gpt4o["provider"]["cost_usd"] is None  # OpenAI's costs are per day, not per model
    assert not gpt4o["over_threshold"]
    mini = r[("2026-11-03", "model", "gpt-4o-mini-2024-07-18", "standard")]
    assert mini["over_threshold"] and mini["provider"]["input_tokens"] == 0
    assert mini["difference"]["input_tokens"] == {"difference": 100, "pct": None}
    assert any("reports no usage" in n for n in mini["notes"])
    # 1.23456789012345678 + 0.86543210987654322 is 2.1 exactly: read through a float it is not.
    day3 = r[("2026-11-03", "day", "(all models)", "")]
    assert day3["llmmeter"]["cost_usd"] == "2.1" and day3["provider"]["cost_usd"] == "2.1"
    assert not day3["over_threshold"]
    batch = r[("2026-11-04", "model", "gpt-4o-2024-08-06", "batch")]
    assert not batch["over_threshold"] and any("estimated usage" in n for n in batch["notes"])
    only_provider = r[("2026-11-05", "model", "gpt-4o-2024-08-06", "standard")]
    assert only_provider["over_threshold"] and only_provider["provider"]["input_tokens"] == 5000
    assert any("no record" in n for n in only_provider["notes"])
    assert any("cannot be narrowed" in n for n in only_provider["notes"])
    assert r[("2026-11-05", "day", "(all models)", "")]["provider"]["cost_usd"] == "0.02"
    assert doc["rows_over_threshold"] == 3
    assert not any(k[2] == "gpt-4o-2024-08-06" and k[0] == "2026-11-06" for k in r)  # an empty bucket adds nothing


def test_openai_narrowing_params(tmp_path: Path, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    seed(db, [])
    provider.routes = dict(OPENAI_ROUTES)
    monkeypatch.setenv("TEST_OPENAI_ADMIN", KEY)
    cfg = write_config(tmp_path / "c.toml", db, provider.url,
                       openai='project_ids = ["proj_a", "proj_b"]\napi_key_ids = ["key_1"]')
    code, out, _ = run(capsys, "--month", "2026-11", "--against", "openai", "--config", str(cfg))
    usage = provider.seen[0].query
    assert [v for k, v in usage if k == "project_ids"] == ["proj_a", "proj_b"]
    assert [v for k, v in usage if k == "api_key_ids"] == ["key_1"]
    costs = next(s for s in provider.seen if s.path.endswith("/costs")).query
    assert [v for k, v in costs if k == "project_ids"] == ["proj_a", "proj_b"]
    assert not any(k == "api_key_ids" for k, _ in costs)  # the Costs API has no such filter
    assert code == 1 and "narrowed keys that did not pass through llmmeter" in out
    assert "cannot be narrowed to llmmeter's traffic: it counts" not in out


@pytest.mark.parametrize(("threshold", "expected"), [("1", 0), ("0.4", 1)])
def test_threshold_exit_code(tmp_path: Path, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str], threshold: str, expected: int) -> None:
    """llmmeter counts 1005 input tokens where the provider says 1000: 0.5%."""
    from tests.reconcile.records import rec

    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    seed(db, [rec(1, 3, "gpt-4o-2024-08-06", input_tokens=1005, output_tokens=10, cost_units=10**10)])
    usage = json.loads(fixture("openai_usage_page1.json"))
    usage["has_more"], usage["next_page"] = False, None
    usage["data"][0]["results"][0].update(input_tokens=1000, input_cached_tokens=0, output_tokens=10)
    costs = json.loads(fixture("openai_costs.json"))
    costs["data"] = costs["data"][:1]
    costs["data"][0]["results"] = [{"object": "organization.costs.result",
                                    "amount": {"value": 1, "currency": "usd"}, "line_item": None, "project_id": None}]
    provider.routes = {"/v1/organization/usage/completions": [json.dumps(usage).encode()],
                       "/v1/organization/costs": [json.dumps(costs).encode()]}
    monkeypatch.setenv("TEST_OPENAI_ADMIN", KEY)
    cfg = write_config(tmp_path / "c.toml", db, provider.url)
    code, out, _ = run(capsys, "--month", "2026-11", "--against", "openai", "--config", str(cfg),
                       "--threshold-pct", threshold, "--format", "json")
    assert code == expected
    row = rows(json.loads(out))[("2026-11-03", "model", "gpt-4o-2024-08-06", "standard")]
    assert row["difference"]["input_tokens"] == {"difference": 5, "pct": "0.50"}


def test_anthropic_compared_by_model_tier_and_dollars(tmp_path: Path, provider: FakeProvider,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    seed(db, anthropic_records())
    provider.routes = dict(ANTHROPIC_ROUTES)
    monkeypatch.setenv("TEST_ANTHROPIC_ADMIN", KEY)
    cfg = write_config(tmp_path / "c.toml", db, provider.url,
                       anthropic='api_key_ids = ["apikey_01"]\nworkspace_ids = ["wrkspc_01"]')
    code, out, _ = run(capsys, "--month", "2026-11", "--against", "anthropic", "--config", str(cfg),
                       "--format", "json", "--threshold-pct", "0")
    for s in provider.seen:
        assert s.headers["x-api-key"] == KEY and s.headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in s.headers
    usage = [s for s in provider.seen if s.path.endswith("/usage_report/messages")]
    assert len(usage) == 2 and dict(usage[1].query)["page"] == "page_MjAyNi0xMS0xMVQwMDowMDowMFo="
    q = usage[0].query
    assert dict(q)["starting_at"] == "2026-11-01T00:00:00Z" and dict(q)["ending_at"] == "2026-12-01T00:00:00Z"
    assert [v for k, v in q if k == "group_by[]"] == ["model", "service_tier"]
    assert ("api_key_ids[]", "apikey_01") in q and ("workspace_ids[]", "wrkspc_01") in q
    cost_q = next(s for s in provider.seen if s.path.endswith("/cost_report")).query
    assert [v for k, v in cost_q if k == "group_by[]"] == ["description", "workspace_id"]

    doc = json.loads(out)
    # The fixture's cost rows have workspace_id null: not one of the narrowed workspaces, so left out.
    row = rows(doc)[("2026-11-10", "model", "claude-sonnet-4-20250514", "standard")]
    assert row["provider"]["cost_usd"] == "0" and row["over_threshold"]
    assert code == 1

    # Not narrowed by workspace: every cost row counts and the dollars agree to the last digit.
    provider.seen.clear()
    cfg = write_config(tmp_path / "c.toml", db, provider.url)
    code, out, _ = run(capsys, "--month", "2026-11", "--against", "anthropic", "--config", str(cfg),
                       "--format", "json", "--threshold-pct", "0")
    doc = json.loads(out)
    r = rows(doc)
    row = r[("2026-11-10", "model", "claude-sonnet-4-20250514", "standard")]
    assert row["llmmeter"] == row["provider"] == {"input_tokens": 1500, "cache_read_tokens": 200,
                                                  "cache_write_tokens": 1500, "output_tokens": 500,
                                                  "cost_usd": "0.019935"}
    searches = r[("2026-11-10", "day", "(not per model)", "")]
    assert searches["llmmeter"]["cost_usd"] == searches["provider"]["cost_usd"] == "0.1"
    assert code == 0 and doc["rows_over_threshold"] == 0
    assert any("cannot be narrowed" in n for n in doc["notes"])


def test_empty_month(tmp_path: Path, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch,
                     capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    seed(db, anthropic_records())  # November: nothing in October
    empty = b'{"data": [], "has_more": false, "next_page": null}'
    provider.routes = {"/v1/organizations/usage_report/messages": [empty], "/v1/organizations/cost_report": [empty]}
    monkeypatch.setenv("TEST_ANTHROPIC_ADMIN", KEY)
    cfg = write_config(tmp_path / "c.toml", db, provider.url)
    for fmt in ("json", "md", "csv"):
        code, out, _ = run(capsys, "--month", "2026-10", "--against", "anthropic", "--config", str(cfg),
                           "--format", fmt)
        assert code == 0
        if fmt == "json":
            assert json.loads(out)["rows"] == []
        if fmt == "md":
            assert "nothing on either side" in out


@pytest.mark.parametrize("status", [401, 403])
def test_refused_key_is_a_clear_error(tmp_path: Path, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str], status: int) -> None:
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    seed(db, [])
    provider.status = status
    provider.body = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}"}}).encode()
    monkeypatch.setenv("TEST_OPENAI_ADMIN", KEY)
    cfg = write_config(tmp_path / "c.toml", db, provider.url)
    code, out, err = run(capsys, "--month", "2026-11", "--against", "openai", "--config", str(cfg))
    assert code == 2 and out == ""
    assert f"HTTP {status}" in err and "TEST_OPENAI_ADMIN" in err and "refused" in err
    assert KEY not in err and "[redacted]" in err


def test_unreachable_and_missing_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    from tests.serve import free_port

    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    seed(db, [])
    cfg = write_config(tmp_path / "c.toml", db, f"http://127.0.0.1:{free_port()}/v1")
    monkeypatch.delenv("TEST_ANTHROPIC_ADMIN", raising=False)
    code, _, err = run(capsys, "--month", "2026-11", "--against", "anthropic", "--config", str(cfg))
    assert code == 2 and "TEST_ANTHROPIC_ADMIN" in err and "not set" in err
    monkeypatch.setenv("TEST_ANTHROPIC_ADMIN", KEY)
    code, _, err = run(capsys, "--month", "2026-11", "--against", "anthropic", "--config", str(cfg))
    assert code == 2 and "cannot reach 127.0.0.1" in err and KEY not in err


def test_bad_month_and_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    seed(db, [])
    cfg = write_config(tmp_path / "c.toml", db, "http://127.0.0.1:9/v1")
    code, _, err = run(capsys, "--month", "2026-13", "--against", "openai", "--config", str(cfg))
    assert code == 2 and "--month" in err
    code, _, err = run(capsys, "--month", "2026-11", "--against", str(tmp_path / "nope"), "--config", str(cfg))
    assert code == 2 and "not openai, anthropic, provider_cost" in err
