"""Model, tier and entry resolution in SPEC order, and the exact calculator."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from pricing import Cost, Price, PriceBook, Resolution, cost, default_tables_dir, format_usd, load_dir
from pricing.calculator import cost_at, unit_prices

T0 = datetime(2026, 10, 23, tzinfo=UTC)
NOV = datetime(2026, 11, 15, tzinfo=UTC)


def price(tier: str = "standard", at: datetime = T0, inp: str = "2", upstream: str | None = None,
          match: tuple[str, ...] = ()) -> Price:
    return Price(model="m", tier=tier, effective_from=at, input=Decimal(inp), output=Decimal("10"),
                 cache_read=Decimal("0.2"), cache_write=Decimal("2"), source="t", match=match, upstream=upstream)


def kimi() -> PriceBook:
    return PriceBook(load_dir(default_tables_dir()))


# SPEC's worked example (20M output tokens in both rows): cost, all_standard, all_highspeed.
@pytest.mark.parametrize(("inp", "cached", "standard", "highspeed"), [
    (100_000_000, 0, "400", "800"),
    (30_000_000, 70_000_000, "274", "534"),
])
def test_worked_example(inp: int, cached: int, standard: str, highspeed: str) -> None:
    book = kimi()
    for tier, want in (("standard", standard), ("highspeed", highspeed)):
        found = book.resolve("kimi-k3.1-pro", tier, NOV)
        assert found is not None and not found.tier_fallback
        c = cost(found.price, inp, cached, 0, 20_000_000)
        assert format_usd(c.total) == want


def test_cost_is_exact_per_category() -> None:
    c = cost(price(inp="0.0001"), 3, 7, 11, 13)
    # 0.0001 USD per million = 1 unit per token; 0.2 = 2000; 2 = 20000; 10 = 100000.
    assert c == Cost(input=3, cache_read=7 * 2000, cache_write=11 * 20000, output=13 * 100000)
    assert c.total == 3 + 14000 + 220000 + 1300000
    assert format_usd(1) == "0.0000000001" and format_usd(0) == "0"
    with pytest.raises(ValueError, match="negative"):
        cost(price(), -1, 0, 0, 0)


def test_one_token_of_every_price_adds_up_without_float_drift() -> None:
    total = sum(cost(price(inp="0.1"), 1, 0, 0, 0).total for _ in range(10**5))
    assert format_usd(total) == "0.01"  # 10^5 tokens at $0.1 per million, summed one by one


def test_model_resolution_prefers_the_response_model() -> None:
    book = kimi()
    assert book.canonical_model("moonshot/kimi-k3.1-pro", "something-else") == "kimi-k3.1-pro"
    assert book.canonical_model("kimi-k3.1-pro-2026-10-23", "Kimi-K3.1-Pro") == "kimi-k3.1-pro"
    assert book.canonical_model("unknown", "unknown-too") is None
    assert book.canonical_model(None, None) is None


def test_tier_resolution_order() -> None:
    book = PriceBook([price(), price("highspeed", match=("m-fast",))], aliases={"turbo": "highspeed"})
    assert book.resolve_tier("m", ["fast", "standard", None]) == "highspeed"  # Anthropic speed first
    assert book.resolve_tier("m", [None, "priority", "standard"]) == "highspeed"  # response service_tier
    assert book.resolve_tier("m", [None, None, "turbo"]) == "highspeed"  # request, via a config alias
    assert book.resolve_tier("m", [None, "default", "priority"]) == "standard"  # response beats request
    assert book.resolve_tier("m-fast", [None, None, None]) == "highspeed"  # the name's own entry
    assert book.resolve_tier("m", [None, None, None]) == "standard"
    assert book.resolve_tier("m", ["flex"]) == "flex"  # unknown tiers stay visible


def test_entry_by_effective_date_and_upstream() -> None:
    dec = datetime(2026, 12, 1, tzinfo=UTC)
    book = PriceBook([price(inp="3", at=dec), price(), price(inp="0", upstream="selfhosted")])
    assert book.resolve("m", "standard", NOV).price.input == Decimal("2")  # type: ignore[union-attr]
    assert book.resolve("m", "standard", dec).price.input == Decimal("3")  # type: ignore[union-attr]
    assert book.resolve("m", "standard", NOV, upstream="selfhosted").price.input == 0  # type: ignore[union-attr]
    assert book.resolve("m", "standard", datetime(2026, 1, 1, tzinfo=UTC)) is None  # before any entry
    assert {p.input for p in book.in_force(dec)} == {Decimal("3"), Decimal("0")}


def test_missing_tier_falls_back_to_standard_and_says_so() -> None:
    found = PriceBook([price()]).resolve("m", "highspeed", NOV)
    assert found is not None and found.tier_fallback and found.price.tier == "standard"
    assert PriceBook([price()]).resolve("nope", "standard", NOV) is None


def test_memoised_resolution_follows_every_entry_change_exactly() -> None:
    # Entries take effect at odd instants (not on the hour), per tier and per upstream; the
    # memo must give what resolve() gives at every instant around each change.
    t1 = datetime(2026, 11, 3, 14, 7, 31, 250_000, tzinfo=UTC)
    t2 = datetime(2026, 11, 20, 9, 0, 0, 1, tzinfo=UTC)
    entries = [price(), price(at=t1, inp="3"), price("highspeed", t2, inp="4"), price(at=t2, inp="5", upstream="vllm")]
    book = PriceBook(entries)
    us = timedelta(microseconds=1)
    instants = [T0 - us, T0, t1 - us, t1, t1 + us, t2 - us, t2, t2 + timedelta(days=40)]
    for _ in range(2):  # the second pass reads the memo
        for at in instants:
            for tier in ("standard", "highspeed", "no-such-tier"):
                for upstream in (None, "vllm", "other"):
                    found = book.resolve("m", tier, at, upstream)
                    assert found == PriceBook(entries).resolve("m", tier, at, upstream)  # a book with no memo yet
                    if found is None:
                        continue
                    assert cost_at(unit_prices(found.price), 5, 7, 11, 13) == cost(found.price, 5, 7, 11, 13)
    fallback = book.resolve("m", "highspeed", t2 - us)
    assert fallback is not None and fallback.tier_fallback and fallback.price.input == Decimal("3")
    # Micro-units (10^-16 USD) per token: $3 per million is 3 × 10^10.
    assert unit_prices(fallback.price) == (3 * 10**10, 2 * 10**9, 2 * 10**10, 10**11)
    assert book.resolve("m", "highspeed", t2, "vllm") == Resolution(price("highspeed", t2, inp="4"), False)


# --- `match` globs: case-insensitive fnmatch, an exact name first. ---

def named(model: str, match: tuple[str, ...], tier: str = "standard") -> Price:
    return Price(model=model, tier=tier, effective_from=T0, input=Decimal(1), output=Decimal(1),
                 cache_read=Decimal(1), cache_write=Decimal(1), source="t", match=match)


def test_a_glob_matches_names_case_insensitively() -> None:
    book = PriceBook([named("claude-sonnet-4.5", ("claude-sonnet-4-5*",))])
    for name in ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929", "Claude-Sonnet-4-5-20250929",
                 "CLAUDE-SONNET-4-5@latest"):
        assert book.canonical_model(name, None) == "claude-sonnet-4.5", name
        assert book.canonical_model(name, None) == "claude-sonnet-4.5", name  # the memo answers the same
    for name in ("claude-sonnet-4", "xclaude-sonnet-4-5", "claude-sonnet-4-6"):
        assert book.canonical_model(name, None) is None, name
    assert book.canonical_model("nope", "claude-sonnet-4-5-x") == "claude-sonnet-4.5"  # the request's name too


def test_an_exact_name_beats_a_glob_and_a_longer_glob_a_shorter_one() -> None:
    book = PriceBook([named("gpt-any", ("gpt-*",)), named("gpt-5.1-mini", ("gpt-5.1-mini*",)),
                      named("gpt-5.1", ("gpt-5.1", "GPT-5.1-2025-11-13"))])
    assert book.canonical_model("gpt-5.1", None) == "gpt-5.1"
    assert book.canonical_model("gpt-5.1-2025-11-13", None) == "gpt-5.1"  # exact, whatever the case
    assert book.canonical_model("gpt-5.1-mini-2025", None) == "gpt-5.1-mini"  # the longer glob
    assert book.canonical_model("gpt-4o", None) == "gpt-any"
    assert book.canonical_model("gpt-5.1-mini", None) == "gpt-5.1-mini"  # `*` matches nothing too
    # The model's own name is exact as well: it beats another model's glob.
    assert PriceBook([named("m-pro", ("m-*",)), named("m-lite", ())]).canonical_model("M-Lite", None) == "m-lite"


def test_a_client_name_with_glob_characters_is_only_a_name() -> None:
    book = PriceBook([named("gpt-5.1", ("gpt-5.1",)), named("claude-sonnet-4.5", ("claude-sonnet-4-5*",)),
                      named("o3", ("o[3]",))])
    # A name is never used as a pattern: these do not match the entries they would as globs.
    for name in ("*", "gpt-*", "gpt-5.?", "gpt-5.[1]", "[g]pt-5.1", "claude-*", "o[3]x"):
        assert book.canonical_model(name, None) is None, name
    # The entry's glob `claude-sonnet-4-5*` is not an exact name: sent as it is, it is a name its glob
    # matches literally (it starts with claude-sonnet-4-5), and `o[3]` is a glob for "o3", not the text "o[3]".
    assert book.canonical_model("claude-sonnet-4-5*", None) == "claude-sonnet-4.5"
    assert book.canonical_model("o3", None) == "o3" and book.canonical_model("o[3]", None) is None


def test_a_glob_implies_a_tier_when_its_entries_share_one() -> None:
    book = PriceBook([named("m", ("m",)), named("m", ("m-fast*", "*-turbo"), tier="highspeed")])
    assert book.resolve_tier("m-fast-2026", [None]) == "highspeed"
    assert book.resolve_tier("M-TURBO", [None]) == "highspeed" and book.canonical_model("x-turbo", None) == "m"
    assert book.resolve_tier("m", [None]) == "standard"
    assert book.resolve_tier("m-fast-2026", ["default"]) == "standard"  # a hint still comes first


def test_glob_matches_are_memoised_within_a_bound() -> None:
    book = PriceBook([named("m", ("m-*",))])
    for n in range(10_000):  # names from clients: the memo never grows past its bound
        assert book.canonical_model(f"m-{n}", None) == "m"
        assert book.canonical_model(f"x-{n}", None) is None
    assert 0 < len(book._matched) <= 4096
    long = "m-" + "x" * 10_000
    assert book.canonical_model(long, None) == "m" and long not in book._matched
