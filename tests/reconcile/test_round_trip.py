"""An exact ledger reconciles: for every source, pages built from the ledger's own calls, served by
a local HTTP server or saved to disk, give exit 0 and no row over a threshold of 0%.

The ledger keeps the tier llmmeter resolved (`highspeed` where a model has no `priority` price)
while the provider's pages say what the provider calls it (`priority`): they are compared by
what the tier means, not by how it is spelled.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from proxy.cli import main
from tests.reconcile.conftest import KEY, FakeProvider, seed, write_config
from tests.reconcile.provider_pages import Call, anthropic_pages, openai_pages, records

# Models with and without a `priority` price in the shipped tables, so both spellings of a tier are met.
OPENAI_MODELS = ("gpt-4o-2024-08-06", "gpt-4-turbo", "gpt-5-nano")
ANTHROPIC_MODELS = ("claude-sonnet-4-20250514", "claude-opus-4-5")
SOURCES = ("openai", "anthropic", "openai-saved", "anthropic-saved", "provider_cost")
_n = itertools.count()

tokens = st.integers(0, 10**7)
money = st.integers(0, 10**12)


@st.composite
def openai_call(draw: st.DrawFn) -> Call:
    kind = draw(st.sampled_from(("sync", "sync", "batch", "embeddings")))
    return Call(draw(st.integers(1, 30)), draw(st.sampled_from(OPENAI_MODELS)),
                draw(st.sampled_from(("default", "priority", "flex", "auto"))), batch=kind == "batch",
                embeddings=kind == "embeddings", input_tokens=draw(tokens), cache_read_tokens=draw(tokens),
                cache_write_tokens=draw(tokens), output_tokens=draw(tokens), cost_units=draw(money))


@st.composite
def anthropic_call(draw: st.DrawFn) -> Call:
    fee = draw(st.sampled_from((0, 0, 100_000_000)))
    return Call(draw(st.integers(1, 30)), draw(st.sampled_from(ANTHROPIC_MODELS)),
                draw(st.sampled_from(("standard", "priority"))), batch=draw(st.booleans()),
                input_tokens=draw(tokens), cache_read_tokens=draw(tokens), cache_write_tokens=draw(tokens),
                cache_write_1h_tokens=draw(tokens), output_tokens=draw(tokens), cost_units=draw(money) + fee,
                fee_units=fee)


PRIORITY_WITHOUT_A_PRICE = [Call(3, "gpt-4-turbo", "priority", input_tokens=10, output_tokens=5, cost_units=7)]
ANTHROPIC_PRIORITY = [Call(4, "claude-opus-4-5", "priority", input_tokens=10, output_tokens=5, cost_units=7)]


def reconcile(capsys: pytest.CaptureFixture[str], cfg: Path, against: str) -> tuple[int, dict[str, Any]]:
    code = main(["reconcile", "--month", "2026-11", "--against", against, "--config", str(cfg),
                 "--format", "json", "--threshold-pct", "0"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return code, json.loads(out)


def round_trip(tmp_path: Path, provider: FakeProvider, capsys: pytest.CaptureFixture[str], source: str,
               openai: list[Call], anthropic: list[Call]) -> None:
    run = tmp_path / f"run{next(_n)}"
    run.mkdir()
    db = f"sqlite:///{run / 'ledger.db'}"
    vendor = source.removesuffix("-saved") if source != "provider_cost" else "openai"
    calls = anthropic if vendor == "anthropic" else openai
    assume(calls or not source.endswith("-saved"))  # empty pages cannot say whose they are (exit 2)
    seed(db, records(calls, vendor, provider_cost=source == "provider_cost"))
    routes = anthropic_pages(calls) if vendor == "anthropic" else openai_pages(calls)
    provider.routes = routes
    against = source
    if source.endswith("-saved"):
        saved = run / "saved"
        saved.mkdir()
        for i, page in enumerate(p for pages in routes.values() for p in pages):
            (saved / f"page{i}.json").write_bytes(page)
        against = str(saved)
    code, doc = reconcile(capsys, write_config(run / "c.toml", db, provider.url), against)
    over = [r for r in doc["rows"] if r["over_threshold"]]
    assert code == 0 and doc["rows_over_threshold"] == 0 and not over, over
    for r in doc["rows"]:
        compared = {k: v for k, v in r["provider"].items() if v is not None}
        assert compared == {k: r["llmmeter"][k] for k in compared}, r


@pytest.mark.parametrize("source", SOURCES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(openai=st.lists(openai_call(), max_size=25), anthropic=st.lists(anthropic_call(), max_size=25))
@example(openai=PRIORITY_WITHOUT_A_PRICE, anthropic=ANTHROPIC_PRIORITY)
def test_pages_built_from_an_exact_ledger_reconcile(tmp_path: Path, provider: FakeProvider,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str], source: str,
                                                    openai: list[Call], anthropic: list[Call]) -> None:
    monkeypatch.setenv("TEST_OPENAI_ADMIN", KEY)
    monkeypatch.setenv("TEST_ANTHROPIC_ADMIN", KEY)
    round_trip(tmp_path, provider, capsys, source, openai, anthropic)


@pytest.mark.parametrize("source", ["openai", "anthropic"])
def test_priority_is_shown_as_the_provider_spells_it(tmp_path: Path, provider: FakeProvider,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str], source: str) -> None:
    """The ledger says `highspeed`, the page `priority`: one row, named as the provider names it."""
    monkeypatch.setenv("TEST_OPENAI_ADMIN", KEY)
    monkeypatch.setenv("TEST_ANTHROPIC_ADMIN", KEY)
    calls = PRIORITY_WITHOUT_A_PRICE if source == "openai" else ANTHROPIC_PRIORITY
    assert records(calls, source)[0].tier == "highspeed"
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    seed(db, records(calls, source))
    provider.routes = openai_pages(calls) if source == "openai" else anthropic_pages(calls)
    code, doc = reconcile(capsys, write_config(tmp_path / "c.toml", db, provider.url), source)
    assert code == 0
    assert [(r["model"], r["tier"]) for r in doc["rows"] if r["scope"] == "model"] == [(calls[0].model, "priority")]
