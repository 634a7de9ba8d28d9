"""Price tables version 2 in the calculator and the book: long-context bands chosen once on the
whole input side, 1-hour cache writes, per-call fees, inference_geo and free tier names; every
version-1 entry prices exactly as before."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from pricing import (
    BILLING_TYPES,
    Band,
    Cost,
    Price,
    PriceBook,
    Priced,
    Tokens,
    cost,
    default_tables_dir,
    format_usd,
    load_dir,
    price_parts,
    price_tokens,
)
from pricing.calculator import rates_for

T0 = datetime(2025, 9, 29, tzinfo=UTC)
D = Decimal


def sonnet(**changes: object) -> Price:
    """SPEC's version-2 example entry: base $3 / $15 / $0.30 / $3.75 / $6 (1h), $10 per 1,000
    searches, and above 200,000 input-side tokens $6 / $22.50 / $0.60 / $7.50 / $12."""
    p = Price(model="claude-sonnet-4.5", tier="standard", effective_from=T0, input=D("3.00"), output=D("15.00"),
              cache_read=D("0.30"), cache_write=D("3.75"), cache_write_1h=D("6.00"), web_search_per_1k=D("10.00"),
              bands=(Band(200_000, input=D("6.00"), output=D("22.50"), cache_read=D("0.60"), cache_write=D("7.50"),
                          cache_write_1h=D("12.00")),),
              source="t", match=("claude-sonnet-4-5*",))
    return replace(p, **changes)  # type: ignore[arg-type]


def usd(priced: Priced) -> str:
    return format_usd(priced.cost.total)


# --- The band: chosen once on the input side, > N applies, the whole request priced at it. ---

@pytest.mark.parametrize(("inp", "band", "dollars"), [
    # 199,999 × $3/M = $0.599997, plus 1,000 output × $15/M = $0.015.
    (199_999, 0, "0.614997"),
    # Exactly 200,000 stays below: 200,000 × $3/M = $0.60, + $0.015.
    (200_000, 0, "0.615"),
    # 200,001 is above: every token at the band, input 200,001 × $6/M = $1.200006, output 1,000 × $22.50/M = $0.0225.
    (200_001, 200_000, "1.222506"),
])
def test_the_band_boundary_is_strictly_above(inp: int, band: int, dollars: str) -> None:
    priced = price_tokens(sonnet(), Tokens(inp, 0, 0, 1_000))
    assert (priced.band, usd(priced), priced.flags) == (band, dollars, ())


def test_cache_reads_push_a_request_over_and_the_whole_request_moves() -> None:
    # 150,000 input alone is below; with 60,000 cache reads the input side is 210,000: above.
    below = price_tokens(sonnet(), Tokens(150_000, 0, 0, 2_000))
    over = price_tokens(sonnet(), Tokens(150_000, 60_000, 0, 2_000))
    assert below.band == 0 and over.band == 200_000
    # 150,000 × $6/M = $0.90; 60,000 × $0.60/M = $0.036; 2,000 × $22.50/M = $0.045.
    assert over.cost == Cost(input=9_000_000_000, cache_read=360_000_000, cache_write=0, output=450_000_000)
    assert usd(over) == "0.981"
    # Cache writes of either TTL count on the input side as well.
    assert price_tokens(sonnet(), Tokens(100_000, 0, 50_000, 0, 50_001)).band == 200_000
    assert price_tokens(sonnet(), Tokens(100_000, 0, 50_000, 0, 50_000)).band == 0


def test_a_band_that_omits_a_price_keeps_the_entrys() -> None:
    p = sonnet(bands=(Band(200_000, input=D("6.00")),))
    priced = price_tokens(p, Tokens(200_001, 10, 20, 30, 40))
    # Input at the band's $6; cache read $0.30, write $3.75, output $15, 1h $6 from the entry.
    assert priced.cost == Cost(200_001 * 60_000, 10 * 3_000, 20 * 37_500, 30 * 150_000, 40 * 60_000)
    assert priced.band == 200_000 and priced.flags == ()


def test_many_bands_pick_the_highest_one_passed() -> None:
    p = sonnet(bands=(Band(1_000, input=D("4")), Band(10_000, input=D("5")), Band(100_000, input=D("6"))))
    picked = [(n, price_tokens(p, Tokens(n, 0, 0, 0)).band) for n in (0, 1_000, 1_001, 10_000, 10_001, 10**9)]
    assert picked == [(0, 0), (1_000, 0), (1_001, 1_000), (10_000, 1_000), (10_001, 10_000), (10**9, 100_000)]
    assert price_tokens(p, Tokens(10_001, 0, 0, 0)).cost.input == 10_001 * 50_000
    # Rates are micro-units (10^-16 USD) per token: $6 per million is 6 × 10^10.
    assert rates_for(p, 100_001).input == 6 * 10**10 and rates_for(p, 5).input == 3 * 10**10


# --- 1-hour cache writes. ---

def test_one_hour_cache_writes_at_their_own_price() -> None:
    priced = price_tokens(sonnet(), Tokens(10, 0, 1_000, 0, 2_000))
    # 1,000 5-minute writes × $3.75/M = $0.00375; 2,000 1-hour writes × $6/M = $0.012.
    assert priced.cost == Cost(10 * 30_000, 0, 37_500_000, 0, 120_000_000) and priced.flags == ()
    assert priced.cost.by_type() == {"input": 300_000, "cache_read": 0, "cache_write": 37_500_000,
                                     "cache_write_1h": 120_000_000, "output": 0}
    assert list(priced.cost.by_type()) == list(BILLING_TYPES)


def test_one_hour_writes_without_a_price_are_priced_at_cache_write_and_flagged() -> None:
    p = sonnet(cache_write_1h=None, bands=())
    priced = price_tokens(p, Tokens(0, 0, 0, 0, 2_000))
    assert priced.cost.cache_write_1h == 2_000 * 37_500 and priced.flags == ("cache_ttl_unpriced",)
    assert price_tokens(p, Tokens(0, 0, 2_000, 0)).flags == ()  # no 1-hour writes, nothing to flag


def test_a_band_without_a_one_hour_price_uses_the_entrys_and_one_with_it_prices_it() -> None:
    inherit = sonnet(bands=(Band(200_000, cache_write=D("7.50")),))
    assert price_tokens(inherit, Tokens(200_000, 0, 0, 0, 1)).cost.cache_write_1h == 60_000  # entry's $6
    # Only the band has a 1-hour price: below it the writes are unpriced, above it priced.
    only_band = sonnet(cache_write_1h=None, bands=(Band(200_000, cache_write_1h=D("12")),))
    assert price_tokens(only_band, Tokens(1, 0, 0, 0, 1)).flags == ("cache_ttl_unpriced",)
    above = price_tokens(only_band, Tokens(200_000, 0, 0, 0, 1))
    assert above.flags == () and above.cost.cache_write_1h == 120_000


# --- Per-call fees. ---

def test_web_search_calls_are_a_fee_beside_the_tokens() -> None:
    priced = price_tokens(sonnet(), Tokens(1_000, 0, 0, 500, web_search_calls=3))
    # 3 calls at $10 per 1,000 = $0.03; tokens $0.003 + $0.0075.
    assert priced.cost.web_search == priced.cost.fees == 300_000_000 and priced.cost.by_fee() == {
        "web_search": 300_000_000}
    assert usd(priced) == "0.0405" and priced.flags == ()
    assert "web_search" not in priced.cost.by_type()
    # Fees are never banded: the same calls cost the same above 200,000.
    assert price_tokens(sonnet(), Tokens(300_000, 0, 0, 0, 0, 3)).cost.web_search == 300_000_000


def test_calls_without_a_fee_price_cost_nothing_and_are_flagged() -> None:
    p = sonnet(web_search_per_1k=None, cache_write_1h=None)
    assert price_tokens(p, Tokens(1, 0, 0, 0, 0, 2)) == Priced(Cost(30_000, 0, 0, 0), 0, ("fee_unpriced",))
    assert price_tokens(p, Tokens(1, 0, 0, 0, 5, 2)).flags == ("cache_ttl_unpriced", "fee_unpriced")
    assert price_tokens(p, Tokens(1, 0, 0, 0)).flags == ()  # the tool offered but not called: no flag


def test_costs_add_up_category_by_category() -> None:
    a, b = Cost(1, 2, 3, 4, 5, 6), Cost(10, 20, 30, 40, 50, 60)
    assert a + b == Cost(11, 22, 33, 44, 55, 66) and (a + b).total == 231 and (a + b).fees == 66
    assert Cost(1, 2, 3, 4) == Cost(1, 2, 3, 4, 0, 0)  # version-1 callers build it with four


def test_iterations_each_pick_their_own_band() -> None:
    # Server-side compaction: a 250,000-token pass (above) and a 20,000-token pass (below).
    parts = [Tokens(250_000, 0, 0, 1_000), Tokens(20_000, 0, 0, 500, 0, 1)]
    priced = price_parts(sonnet(), parts)
    assert priced.cost == price_tokens(sonnet(), parts[0]).cost + price_tokens(sonnet(), parts[1]).cost
    # 250,000 × $6 + 1,000 × $22.50 = $1.5225; 20,000 × $3 + 500 × $15 = $0.0675; 1 call $0.01.
    assert usd(priced) == "1.6" and priced.band == 200_000
    # Summed, they would have been one request above the band: $1.62 + $0.03375 + $0.01.
    assert usd(price_tokens(sonnet(), Tokens(270_000, 0, 0, 1_500, 0, 1))) == "1.66375"
    assert price_parts(sonnet(cache_write_1h=None), [Tokens(1, 0, 0, 0, 1), Tokens(1, 0, 0, 0, 1)]).flags == (
        "cache_ttl_unpriced",)
    with pytest.raises(ValueError):
        price_parts(sonnet(), [])


# --- Every version-1 table prices as it did. ---

def old_cost_units(p: Price, inp: int, read: int, write: int, out: int) -> int:
    """Version 1's arithmetic, written out: tokens × USD per million × 10^10 / 10^6, exactly."""
    pairs = ((inp, p.input), (read, p.cache_read), (write, p.cache_write), (out, p.output))
    total = sum((Decimal(n) * price * 10**4 for n, price in pairs), Decimal(0))
    assert total == total.to_integral_value()
    return int(total)


GRID = (0, 1, 7, 999, 200_000, 200_001, 123_456_789, 10**9)


def test_every_shipped_version_1_entry_prices_identically() -> None:
    v1 = [p for p in load_dir(default_tables_dir())
          if not p.bands and p.cache_write_1h is None and p.web_search_per_1k is None]
    assert any(p.model == "kimi-k3.1-pro" for p in v1)
    for p in v1:
        for inp, read, write, out in itertools.product(GRID, repeat=4):
            priced = price_tokens(p, Tokens(inp, read, write, out))
            want = old_cost_units(p, inp, read, write, out)
            assert priced.cost.total == want == cost(p, inp, read, write, out).total, (p.where, inp, read, write, out)
            assert priced.band == 0 and priced.flags == ()
            assert priced.cost.cache_write_1h == priced.cost.web_search == 0


def test_the_shipped_kimi_worked_example_still_adds_up() -> None:
    book = PriceBook(load_dir(default_tables_dir()))
    nov = datetime(2026, 11, 15, tzinfo=UTC)
    for tier, want in (("standard", "274"), ("highspeed", "534")):
        found = book.resolve("kimi-k3.1-pro", tier, nov)
        assert found is not None
        assert usd(price_tokens(found.price, Tokens(30_000_000, 70_000_000, 0, 20_000_000))) == want


# --- The book: inference_geo and free tier names. ---

def entry(tier: str = "standard", inp: str = "3", geo: str | None = None, at: datetime = T0,
          upstream: str | None = None) -> Price:
    return Price(model="m", tier=tier, effective_from=at, input=D(inp), output=D("15"), cache_read=D("0.3"),
                 cache_write=D("3.75"), source="t", inference_geo=geo, upstream=upstream)


def test_an_entry_naming_the_geo_wins_and_other_geos_use_the_plain_entry() -> None:
    book = PriceBook([entry(), entry(inp="3.30", geo="us")])
    at = T0 + timedelta(days=1)
    us = book.resolve("m", "standard", at, geo="us")
    assert us is not None and us.price.input == D("3.30") and not us.geo_unpriced
    assert book.resolve("m", "standard", at, geo="US") == us  # as Anthropic spells it or not
    for geo, unpriced in (("eu", True), ("global", False), ("not_available", False), (None, False)):
        found = book.resolve("m", "standard", at, geo=geo)
        assert found is not None and found.price.input == D("3") and found.geo_unpriced is unpriced, geo
    # A geo entry is never used without its geo, nor inherited by another tier.
    only_geo = PriceBook([entry(geo="us")])
    assert only_geo.resolve("m", "standard", at) is None
    fallback = PriceBook([entry(), entry(inp="3.30", geo="us")]).resolve("m", "priority", at, geo="us")
    assert fallback is not None and fallback.tier_fallback and fallback.price.input == D("3.30")


def test_geo_entries_follow_their_dates_and_upstreams_through_the_memo() -> None:
    t1 = T0 + timedelta(days=10, microseconds=7)
    book = PriceBook([entry(), entry(inp="3.30", geo="us"), entry(inp="3.60", geo="us", at=t1),
                      entry(inp="1", geo="us", upstream="bedrock")])
    us = timedelta(microseconds=1)
    for _ in range(2):  # the second pass reads the memo
        assert book.resolve("m", "standard", t1 - us, geo="us").price.input == D("3.30")  # type: ignore[union-attr]
        assert book.resolve("m", "standard", t1, geo="us").price.input == D("3.60")  # type: ignore[union-attr]
        assert book.resolve("m", "standard", t1, "bedrock", "us").price.input == D("1")  # type: ignore[union-attr]
        assert book.resolve("m", "standard", t1, "bedrock").price.input == D("3")  # type: ignore[union-attr]
        assert book.resolve("m", "standard", T0 - us, geo="us") is None
    assert {(p.input, p.inference_geo) for p in book.in_force(t1)} == {
        (D("3"), None), (D("3.60"), "us"), (D("1"), "us")}


def test_a_hint_is_used_by_its_own_name_when_the_model_has_that_tier_in_force() -> None:
    later = T0 + timedelta(days=30)
    book = PriceBook([entry(), entry("priority", "5"), entry("flex", "1.5", at=later), entry("highspeed", "6")])
    assert book.resolve_tier("m", ["priority"], model="m", at=T0) == "priority"  # priced as served
    assert book.resolve_tier("m", [None, "Priority"], model="m", at=T0) == "priority"
    assert book.resolve_tier("m", ["priority"]) == "highspeed"  # no model given: the aliases, as before
    # flex is not in force yet: through the aliases (flex has none, so it stays flex and falls back).
    assert book.resolve_tier("m", ["flex"], model="m", at=T0) == "flex"
    assert book.resolve_tier("m", ["flex"], model="m", at=later) == "flex"
    assert book.resolve_tier("m", ["fast"], model="m", at=T0) == "highspeed"
    assert book.resolve_tier("m", ["default"], model="m", at=T0) == "standard"
    assert book.resolve_tier("m", [None, None, None], model="m", at=T0) == "standard"
    other = PriceBook([entry(), entry("highspeed", "6")])
    assert other.resolve_tier("m", ["priority"], model="m", at=T0) == "highspeed"  # no priority entry
    not_yet = PriceBook([entry(), entry("highspeed", "6"), entry("priority", "5", at=later)])
    assert not_yet.resolve_tier("m", ["priority"], model="m", at=T0) == "highspeed"
    assert not_yet.resolve_tier("m", ["priority"], model="m", at=later) == "priority"


def test_kimi_priority_still_maps_to_highspeed() -> None:
    book = PriceBook(load_dir(default_tables_dir()))
    nov = datetime(2026, 11, 15, tzinfo=UTC)
    assert book.resolve_tier("kimi-k3.1-pro", ["priority"], model="kimi-k3.1-pro", at=nov) == "highspeed"
    assert book.resolve_tier("kimi-k3.1-pro", [None, "fast"], model="kimi-k3.1-pro", at=nov) == "highspeed"


# --- The hot path. ---

def test_pricing_a_request_takes_microseconds() -> None:
    p, tokens = sonnet(), Tokens(210_000, 5_000, 1_000, 2_000, 500, 2)
    price_tokens(p, tokens)
    n = 20_000
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            price_tokens(p, tokens)
        best = min(best, (time.perf_counter() - start) / n)
    assert best < 20e-6, f"{best * 1e6:.1f} µs a request"


def test_entries_priced_in_turn_keep_their_own_prices() -> None:
    # The per-entry memo must never hand one entry's unit prices to another.
    entries = [sonnet(input=D(n)) for n in range(1, 50)]
    for _ in range(3):
        for n, p in enumerate(entries, 1):
            assert price_tokens(p, Tokens(1, 0, 0, 0)).cost.input == n * 10**4
    for n in range(1, 2000):  # built and dropped: ids get reused
        assert price_tokens(sonnet(input=D(n)), Tokens(1, 0, 0, 0)).cost.input == n * 10**4


def test_rates_price_summed_counts_exactly_and_round_once() -> None:
    # What a report's what-ifs do with an hourly row's sums: counts × micro-unit rates, one rounding.
    base = rates_for(sonnet(), 1)
    assert base.units(1_000, 0, 0, 0, 500, 3) == price_tokens(sonnet(), Tokens(1_000, 0, 0, 500, 0, 3)).cost.total
    fine = rates_for(sonnet(input=D("0.0000000001"), bands=()), 1)
    assert fine.input == 1 and fine.fee == 10**14  # $10 per 1,000 calls: 10^-2 USD, 10^14 micro-units a call
    assert (fine.units(input=500_000), fine.units(input=1_500_000), fine.units(input=1_500_001)) == (0, 2, 2)
