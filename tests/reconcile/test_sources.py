"""Saved pages (the provider told from their shape), `provider_cost`, and the ledger's daily sums."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from proxy.cli import main
from proxy.ledger.store import open_store
from proxy.ledger.store.daily import daily_sums
from tests.reconcile.conftest import FIXTURES, seed, write_config
from tests.reconcile.records import USD, anthropic_records, openai_records, rec


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
        return
    url: str = request.getfixturevalue("pg_url")
    yield url


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["reconcile", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_daily_sums_both_backends(any_db: str) -> None:
    seed(any_db, [*openai_records(), *anthropic_records(),
                  rec(20, 3, "gpt-4o-2024-08-06", cost_units=None, input_tokens=5),  # unpriced
                  rec(21, 30, "gpt-4o-2024-08-06", start=datetime(2026, 12, 1, tzinfo=UTC), input_tokens=7)])
    store = open_store(any_db, read_only=True)
    got = {(r.day, r.model, r.tier, r.upstream): r
           for r in daily_sums(store, datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))}
    gpt4o = got[(date(2026, 11, 3), "gpt-4o-2024-08-06", "standard", "openai")]
    assert (gpt4o.requests, gpt4o.input_tokens, gpt4o.cache_read_tokens, gpt4o.output_tokens) == (3, 1405, 600, 500)
    assert gpt4o.cost_units == 2 * USD and gpt4o.unpriced == 1
    batch = got[(date(2026, 11, 4), "gpt-4o-2024-08-06", "batch", "openai")]
    assert batch.estimated == 1 and batch.cost_units == USD // 2  # the batch endpoint is billed
    sonnet = got[(date(2026, 11, 10), "claude-sonnet-4-20250514", "standard", "anthropic")]
    assert (sonnet.cache_write_tokens, sonnet.cache_write_1h_tokens, sonnet.fee_units) == (500, 1000, USD // 10)
    assert (date(2026, 11, 3), "gpt-4o-2024-08-06", "standard", "azure") in got
    assert all(k[0].month == 11 for k in got)  # December left out
    assert sum(r.requests for r in got.values()) == 7  # the models listing is not billed


def test_saved_pages_folder_same_as_api(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    seed(db, openai_records())
    cfg = write_config(tmp_path / "c.toml", db, "http://127.0.0.1:9/v1", openai='upstreams = ["openai"]')
    saved = tmp_path / "saved"
    saved.mkdir()
    for name in ("openai_usage_page1.json", "openai_usage_page2.json", "openai_costs.json"):
        shutil.copy(FIXTURES / name, saved / name)
    code, out, _ = run(capsys, "--month", "2026-11", "--against", str(saved), "--config", str(cfg),
                       "--format", "json", "--threshold-pct", "0")
    doc = json.loads(out)
    assert code == 1 and doc["source"].startswith("openai (saved pages")
    assert doc["rows_over_threshold"] == 3
    day3 = next(r for r in doc["rows"] if r["date"] == "2026-11-03" and r["scope"] == "day")
    assert day3["provider"]["cost_usd"] == "2.1"

    # Usage pages alone: tokens compared, dollars not.
    (saved / "openai_costs.json").unlink()
    code, out, _ = run(capsys, "--month", "2026-11", "--against", str(saved), "--config", str(cfg),
                       "--format", "json")
    doc = json.loads(out)
    assert "no cost pages: dollars are not compared" in doc["notes"]
    assert not any(r["scope"] == "day" for r in doc["rows"])


def test_saved_anthropic_file_list_and_mixed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    seed(db, anthropic_records())
    cfg = write_config(tmp_path / "c.toml", db, "http://127.0.0.1:9/v1")
    pages = [json.loads((FIXTURES / n).read_text())
             for n in ("anthropic_usage_page1.json", "anthropic_usage_page2.json", "anthropic_cost.json")]
    one = tmp_path / "anthropic-2026-11.json"
    one.write_text(json.dumps(pages))
    code, out, _ = run(capsys, "--month", "2026-11", "--against", str(one), "--config", str(cfg), "--format", "json")
    assert code == 0 and json.loads(out)["source"].startswith("anthropic")

    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(FIXTURES / "anthropic_cost.json", mixed / "a.json")
    shutil.copy(FIXTURES / "openai_costs.json", mixed / "b.json")
    code, _, err = run(capsys, "--month", "2026-11", "--against", str(mixed), "--config", str(cfg))
    assert code == 2 and "both anthropic and openai" in err

    odd = tmp_path / "odd.json"
    odd.write_text('{"hello": "world"}')
    code, _, err = run(capsys, "--month", "2026-11", "--against", str(odd), "--config", str(cfg))
    assert code == 2 and "not a page of OpenAI's or Anthropic's" in err


def test_provider_cost(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    seed(db, [
        rec(1, 2, "x-ai/grok-4", upstream="openrouter", cost_units=3 * USD, provider_cost_units=3 * USD),
        rec(2, 2, "x-ai/grok-4", upstream="openrouter", cost_units=USD, provider_cost_units=USD + 12_345),
        rec(3, 2, "=HYPERLINK(\"x\")", upstream="openrouter", cost_units=None, provider_cost_units=USD // 4),
        rec(4, 2, "gpt-4o", upstream="openai", cost_units=USD),  # no provider cost: not compared
    ])
    cfg = write_config(tmp_path / "c.toml", db, "http://127.0.0.1:9/v1")
    code, out, _ = run(capsys, "--month", "2026-11", "--against", "provider_cost", "--config", str(cfg),
                       "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["compared_requests"] == 3
    assert [(d["id"], d["cost_usd"], d["provider_cost_usd"], d["difference_usd"]) for d in doc["requests"]] == [
        ("req-000002", "1", "1.0000012345", "-0.0000012345"), ("req-000003", None, "0.25", None)]
    grok = next(r for r in doc["rows"] if r["model"] == "x-ai/grok-4")
    assert grok["llmmeter"]["cost_usd"] == "4" and grok["provider"]["cost_usd"] == "4.0000012345"
    assert grok["difference"]["cost_usd"]["pct"] == "0.00" and not grok["over_threshold"]
    unpriced = next(r for r in doc["rows"] if r["model"].startswith("=HYPERLINK"))
    assert unpriced["over_threshold"] and any("unpriced" in n for n in unpriced["notes"])
    code, out, _ = run(capsys, "--month", "2026-11", "--against", "provider_cost", "--config", str(cfg),
                       "--format", "csv")
    assert "'=HYPERLINK" in out and "\n=HYPERLINK" not in out and ",=HYPERLINK" not in out
    assert "req-000002" in out
    code, out, _ = run(capsys, "--month", "2026-11", "--against", "provider_cost", "--config", str(cfg))
    assert "## Requests whose cost differs (2 of 3 compared)" in out and "unpriced" in out
