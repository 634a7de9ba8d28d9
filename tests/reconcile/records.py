"""The tests' ledger records: November 2026, matching the fixtures' pages."""

from __future__ import annotations

from datetime import UTC, datetime

from proxy.ledger.record import Record

USD = 10_000_000_000  # units per dollar


def rec(i: int, day: int, model: str, **over: object) -> Record:
    fields: dict[str, object] = dict(
        id=f"req-{i:06d}", start=datetime(2026, 11, day, 12, 0, i % 60, tzinfo=UTC), tenant="t", endpoint="chat",
        stream=False, code=200, outcome="ok", upstream="openai", model_requested=model, response_model=model,
        model=model, tier="standard", usage_source="upstream", cost_units=0, price_band=0, fee_units=0)
    fields.update(over)
    return Record(**fields)  # type: ignore[arg-type]


def openai_records() -> list[Record]:
    """Against the OpenAI fixtures: 11-03 gpt-4o matches (two requests), gpt-4o-mini only here;
    11-04 a batch request (estimated); 11-05 nothing (the provider has a request)."""
    return [
        rec(1, 3, "gpt-4o-2024-08-06", input_tokens=700, cache_read_tokens=300, output_tokens=250, cost_units=USD),
        rec(2, 3, "gpt-4o-2024-08-06", input_tokens=700, cache_read_tokens=300, output_tokens=250, cost_units=USD),
        rec(3, 3, "gpt-4o-mini-2024-07-18", input_tokens=100, output_tokens=50, cost_units=USD // 10),
        rec(4, 4, "gpt-4o-2024-08-06", tier="batch", endpoint="batch", input_tokens=1000, output_tokens=100,
            cost_units=USD // 2, usage_source="estimated"),
        # Not billed: a models listing and a request on another upstream.
        rec(5, 3, "gpt-4o-2024-08-06", endpoint="models", input_tokens=9, cost_units=None),
        rec(6, 3, "gpt-4o-2024-08-06", upstream="azure", input_tokens=999_999, cost_units=USD * 9),
    ]


def anthropic_records() -> list[Record]:
    """Against the Anthropic fixtures: 11-10 one Sonnet 4 request with ten web searches."""
    token_units = 199_350_000  # $0.019935: 0.45 + 0.75 + 0.006 + 0.1875 + 0.6 cents
    return [rec(10, 10, "claude-sonnet-4-20250514", upstream="anthropic", endpoint="messages", input_tokens=1500,
                cache_read_tokens=200, cache_write_tokens=500, cache_write_1h_tokens=1000, output_tokens=500,
                web_search_calls=10, fee_units=USD // 10, cost_units=token_units + USD // 10)]
