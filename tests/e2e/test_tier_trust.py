"""A tier the request names is a wish: it may lower the recorded price only when the answer
confirms it, or the upstream is configured as honouring it (`[[upstream]] honoured_tiers`).

The official openai SDK -> a real llmmeter -> the fake upstream, which echoes a service_tier only
when told to (x-fake-service-tier), as vLLM, llama.cpp and many OpenAI-compatible hosts never do.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.e2e.test_metering import units
from tests.fake_upstream import FakeUpstream

TABLE = """
[[price]]
model = "gpt-tiered"
match = ["gpt-tiered"]
tier = "standard"
effective_from = 2026-01-01T00:00:00Z
input = "2.00"
output = "8.00"
cache_read = "0.20"
cache_write = "2.00"
source = "test fixture"

[[price]]
model = "gpt-tiered"
tier = "flex"
effective_from = 2026-01-01T00:00:00Z
input = "1.00"
output = "4.00"
cache_read = "0.10"
cache_write = "1.00"
source = "test fixture"

[[price]]
model = "gpt-tiered"
match = ["gpt-tiered-priority"]
tier = "priority"
effective_from = 2026-01-01T00:00:00Z
input = "4.00"
output = "16.00"
cache_read = "0.40"
cache_write = "4.00"
source = "test fixture"
"""
RATES = {"standard": (2, 8), "flex": (1, 4), "priority": (4, 16)}  # USD per million: input, output
USAGE = {"x-fake-usage": json.dumps({"prompt": 100_000, "completion": 50})}
MSGS: Any = [{"role": "user", "content": "hi"}]


def cost(tier: str) -> int:
    inp, out = RATES[tier]
    return units(Decimal(100_000 * inp + 50 * out) / 10**6)


@pytest.fixture
def tiered(prices_dir: Path) -> Path:
    (prices_dir / "tiered.toml").write_text(TABLE)
    return prices_dir


def _client(base_url: str) -> OpenAI:
    return OpenAI(base_url=base_url, api_key="sk-client-key", max_retries=0)


def _flags(row: dict[str, Any]) -> list[str]:
    return (row["flags"] or "").split(",")


def test_an_unconfirmed_cheaper_tier_is_priced_at_standard(fake: FakeUpstream, serve: Any, tiered: Path) -> None:
    proxy = serve(upstream=fake.base_url)
    client = _client(proxy.base_url)
    client.chat.completions.create(model="gpt-tiered", messages=MSGS, service_tier="flex", extra_headers=USAGE)
    list(client.chat.completions.create(model="gpt-tiered", messages=MSGS, service_tier="flex", stream=True,
                                        extra_headers=USAGE))
    for row in proxy.rows(expect=2):
        assert (row["tier"], row["price_tier"], row["cost_units"]) == ("standard", "standard", cost("standard"))
        assert "tier_unconfirmed" in _flags(row)


def test_a_tier_the_answer_confirms_is_priced_as_served(fake: FakeUpstream, serve: Any, tiered: Path) -> None:
    proxy = serve(upstream=fake.base_url)
    client = _client(proxy.base_url)
    client.chat.completions.create(model="gpt-tiered", messages=MSGS, service_tier="flex",
                                   extra_headers={**USAGE, "x-fake-service-tier": "flex"})
    # The answer names the tier it served, and that is the record's, whatever the request asked.
    client.chat.completions.create(model="gpt-tiered", messages=MSGS, service_tier="flex",
                                   extra_headers={**USAGE, "x-fake-service-tier": "default"})
    flex, default = proxy.rows(expect=2)
    assert (flex["tier"], flex["cost_units"]) == ("flex", cost("flex"))
    assert (default["tier"], default["cost_units"]) == ("standard", cost("standard"))
    assert "tier_unconfirmed" not in _flags(flex) + _flags(default)


def test_a_dearer_request_tier_is_kept(fake: FakeUpstream, serve: Any, tiered: Path) -> None:
    proxy = serve(upstream=fake.base_url)
    _client(proxy.base_url).chat.completions.create(model="gpt-tiered", messages=MSGS, service_tier="priority",
                                                    extra_headers=USAGE)
    [row] = proxy.rows(expect=1)
    assert (row["tier"], row["cost_units"]) == ("priority", cost("priority"))
    assert "tier_unconfirmed" not in _flags(row)


def test_the_request_cannot_undercut_the_tier_its_model_name_gives(fake: FakeUpstream, serve: Any,
                                                                  tiered: Path) -> None:
    proxy = serve(upstream=fake.base_url)
    client = _client(proxy.base_url)
    for tier in ("flex", "default"):
        client.chat.completions.create(model="gpt-tiered-priority", messages=MSGS, service_tier=tier,  # type: ignore[arg-type]
                                       extra_headers=USAGE)
    for row in proxy.rows(expect=2):
        assert (row["tier"], row["cost_units"]) == ("priority", cost("priority"))
        assert "tier_unconfirmed" in _flags(row)


def test_an_upstream_that_honours_a_tier_is_believed(fake: FakeUpstream, serve: Any, tiered: Path) -> None:
    config = f"""
[[upstream]]
name = "local"
base_url = "{fake.base_url}"
honoured_tiers = ["Flex"]
"""
    proxy = serve(config=config)
    client = _client(proxy.base_url)
    client.chat.completions.create(model="gpt-tiered", messages=MSGS, service_tier="flex", extra_headers=USAGE)
    [row] = proxy.rows(expect=1)
    assert (row["tier"], row["cost_units"]) == ("flex", cost("flex"))
    assert "tier_unconfirmed" not in _flags(row)


def test_a_budget_reserves_a_cheaper_tier_at_the_price_it_may_be_recorded_at(fake: FakeUpstream, serve: Any,
                                                                             tiered: Path) -> None:
    # 1M output tokens: $4 at flex, $8 at standard, which the record gets if no answer confirms flex.
    config = """
[[budget]]
name = "proxy-day"
period = "day"
limit_usd = "6"
mode = "enforce"
"""
    proxy = serve(upstream=fake.base_url, config=config)
    client = _client(proxy.base_url)
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="gpt-tiered", messages=MSGS, service_tier="flex",
                                       max_tokens=1_000_000, extra_headers=USAGE)
    assert refused.value.code == "budget_exceeded"
