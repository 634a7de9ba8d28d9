"""The shipped price tables (pricing/tables) as a user meets them: `llmmeter prices check` accepts
them, a model name reaches its entry, and one request per billing dimension prices to the dollar
figure worked out by hand below from the published prices (USD per million tokens, per 1,000
calls for fees). A price that moved a digit would change these figures."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from pricing import Price, PriceBook, Priced, Tokens, default_tables_dir, load_dir, price_tokens, usd

READ = datetime(2026, 12, 6, tzinfo=UTC)  # the day the shipped prices were read
SONNET_45_IN_SERVICE = datetime(2026, 11, 1, tzinfo=UTC)  # retired 2026-11-30


@pytest.fixture(scope="module")
def book() -> PriceBook:
    return PriceBook(load_dir(default_tables_dir()))


def entry(book: PriceBook, name: str, tier: str = "standard", at: datetime = READ) -> Price:
    """The entry a request naming `name`, served at `tier`, is priced at."""
    model = book.canonical_model(name, None)
    assert model is not None, f"{name} is not in the shipped tables"
    found = book.resolve(model, book.resolve_tier(name, [tier], model=model, at=at), at)
    assert found is not None and not found.tier_fallback, (name, tier)
    assert found.price.tier == tier
    return found.price


def dollars(priced: Priced) -> Decimal:
    return usd(priced.cost.total)


def test_prices_check_accepts_the_shipped_tables() -> None:
    directory = default_tables_dir()
    r = subprocess.run([sys.executable, "-m", "proxy", "prices", "check", str(directory)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"{len(load_dir(directory))} price entries, all valid" in r.stdout


def test_every_shipped_entry_says_where_it_was_read() -> None:
    # Imported entries name the genai-prices release and the provider; the hand-written Kimi
    # entries name the launch coverage they were read in.
    for p in load_dir(default_tables_dir()):
        if p.model == "kimi-k3.1-pro" and "genai-prices" not in p.source:
            assert "launch" in p.source, p.where
            continue
        assert p.source.startswith("genai-prices 0.2.5 (") and "): provider " in p.source, p.where
        assert "genai-prices-" in p.file, p.where


def test_kimi_k3_1_pro_stays_as_the_launch_coverage_gives_it(book: PriceBook) -> None:
    # genai-prices adds a 1-hour cache write price; the hand-written entries keep their own.
    launch = {"standard": ("2.00", "10.00", "0.20", "2.00"), "highspeed": ("4.00", "20.00", "0.20", "4.00")}
    for tier, prices in launch.items():
        p = entry(book, "kimi-k3.1-pro", tier)
        assert (p.input, p.output, p.cache_read, p.cache_write) == tuple(Decimal(v) for v in prices)
        assert p.cache_write_1h is None and p.file.endswith("kimi.toml")


def test_dated_snapshot_names_reach_their_model(book: PriceBook) -> None:
    assert book.canonical_model("claude-sonnet-4-5-20250929", None) == "claude-sonnet-4-5"
    assert book.canonical_model("gpt-5.1-2025-11-13", None) == "gpt-5.1"
    assert book.canonical_model(None, "claude-haiku-5-5") == "claude-haiku-5-5"


# Long-context band, Claude Haiku 5.5: prompts up to 100,000 tokens at the base prices, over
# 100,000 every category at the band's (input 0.50, output 2.50, cache read 0.05).
def test_band_exactly_at_the_threshold_stays_at_base_prices(book: PriceBook) -> None:
    # input side 60,000 + 40,000 cache reads = 100,000: not above, base prices.
    # 60,000 x 0.10 / 10^6 = 0.006; 40,000 x 0.01 / 10^6 = 0.0004; 1,000 x 0.50 / 10^6 = 0.0005
    priced = price_tokens(entry(book, "claude-haiku-5-5"), Tokens(60_000, 40_000, 0, 1_000))
    assert (dollars(priced), priced.band) == (Decimal("0.0069"), 0)


def test_band_a_cache_read_pushes_the_whole_request_over(book: PriceBook) -> None:
    # input side 60,000 + 40,001 = 100,001 > 100,000: the whole request at the band.
    # 60,000 x 0.50 / 10^6 = 0.03; 40,001 x 0.05 / 10^6 = 0.00200005; 1,000 x 2.50 / 10^6 = 0.0025
    priced = price_tokens(entry(book, "claude-haiku-5-5"), Tokens(60_000, 40_001, 0, 1_000))
    assert (dollars(priced), priced.band) == (Decimal("0.03450005"), 100_000)


@pytest.mark.parametrize(("inp", "want", "band"), [
    # 199,999 x 3 / 10^6 = 0.599997; 10,000 x 15 / 10^6 = 0.15
    (199_999, "0.749997", 0),
    # 200,000 x 3 / 10^6 = 0.6; + 0.15
    (200_000, "0.75", 0),
    # 200,001 x 6 / 10^6 = 1.200006; 10,000 x 22.50 / 10^6 = 0.225
    (200_001, "1.425006", 200_000),
])
def test_band_sonnet_4_5_above_200k_input_tokens(book: PriceBook, inp: int, want: str, band: int) -> None:
    priced = price_tokens(entry(book, "claude-sonnet-4-5-20250929", at=SONNET_45_IN_SERVICE),
                          Tokens(inp, 0, 0, 10_000))
    assert (dollars(priced), priced.band) == (Decimal(want), band)


def test_band_prices_cache_writes_of_both_ttls(book: PriceBook) -> None:
    # Sonnet 4.5, 150,000 input + 40,000 5-minute writes + 20,000 1-hour writes = 210,000 > 200,000:
    # 150,000 x 6 / 10^6 = 0.9; 40,000 x 7.50 / 10^6 = 0.3; 20,000 x 12 / 10^6 = 0.24;
    # 2,000 x 22.50 / 10^6 = 0.045
    priced = price_tokens(entry(book, "claude-sonnet-4-5", at=SONNET_45_IN_SERVICE),
                          Tokens(150_000, 0, 40_000, 2_000, cache_write_1h=20_000))
    assert (dollars(priced), priced.band, priced.flags) == (Decimal("1.485"), 200_000, ())


def test_one_hour_cache_writes_at_their_own_price(book: PriceBook) -> None:
    # Haiku 5.5, input side 1,000 + 2,000 + 50,000 = 53,000 (base prices):
    # 1,000 x 0.10 / 10^6 = 0.0001; 2,000 5-minute writes x 0.125 / 10^6 = 0.00025;
    # 50,000 1-hour writes x 0.20 / 10^6 = 0.01; 500 x 0.50 / 10^6 = 0.00025
    priced = price_tokens(entry(book, "claude-haiku-5-5"), Tokens(1_000, 0, 2_000, 500, cache_write_1h=50_000))
    assert (dollars(priced), usd(priced.cost.cache_write_1h), priced.flags) == (
        Decimal("0.0106"), Decimal("0.01"), ())


def test_anthropic_web_search_fee(book: PriceBook) -> None:
    # Haiku 5.5, 3 searches at $10 per 1,000 = 0.03; 2,000 x 0.10 / 10^6 = 0.0002; 300 x 0.50 / 10^6 = 0.00015
    priced = price_tokens(entry(book, "claude-haiku-5-5"), Tokens(2_000, 0, 0, 300, web_search_calls=3))
    assert (dollars(priced), usd(priced.cost.fees), priced.flags) == (Decimal("0.03035"), Decimal("0.03"), ())


def test_openai_web_search_fee(book: PriceBook) -> None:
    # GPT-5.1, 2 web_search_call items at $10 per 1,000 = 0.02; 10,000 x 1.25 / 10^6 = 0.0125;
    # 2,000 cached x 0.125 / 10^6 = 0.00025; 800 x 10 / 10^6 = 0.008
    priced = price_tokens(entry(book, "gpt-5.1"), Tokens(10_000, 2_000, 0, 800, web_search_calls=2))
    assert (dollars(priced), usd(priced.cost.fees)) == (Decimal("0.04075"), Decimal("0.02"))


# OpenAI tiers, one request (10,000 uncached input, 2,000 cached, 800 output) as each tier serves it.
@pytest.mark.parametrize(("tier", "want"), [
    # 10,000 x 1.25 = 0.0125; 2,000 x 0.125 = 0.00025; 800 x 10 = 0.008 (all / 10^6)
    ("standard", "0.02075"),
    # 10,000 x 2.50 = 0.025; 2,000 x 0.25 = 0.0005; 800 x 20 = 0.016
    ("priority", "0.0415"),
    # 10,000 x 0.625 = 0.00625; 2,000 x 0.0625 = 0.000125; 800 x 5 = 0.004
    ("flex", "0.010375"),
    ("batch", "0.010375"),
])
def test_openai_tiers_priced_as_served(book: PriceBook, tier: str, want: str) -> None:
    priced = price_tokens(entry(book, "gpt-5.1", tier), Tokens(10_000, 2_000, 0, 800))
    assert dollars(priced) == Decimal(want)


def test_batch_web_search_at_the_standard_fee(book: PriceBook) -> None:
    # genai-prices keeps the web search fee on batch (no batch rate is published for it):
    # 10,000 x 0.625 / 10^6 = 0.00625; 1 call x 10 / 1,000 = 0.01
    priced = price_tokens(entry(book, "gpt-5.1", "batch"), Tokens(10_000, 0, 0, 0, web_search_calls=1))
    assert (dollars(priced), usd(priced.cost.fees), priced.flags) == (Decimal("0.01625"), Decimal("0.01"), ())


def test_anthropic_batch_halves_every_category_and_its_band(book: PriceBook) -> None:
    # Haiku 5.5 batch, over 100,000 input-side tokens: the band's halves (input 0.25, cache read 0.025,
    # output 1.25): 90,000 x 0.25 = 0.0225; 20,000 x 0.025 = 0.0005; 1,000 x 1.25 = 0.00125 (all / 10^6)
    priced = price_tokens(entry(book, "claude-haiku-5-5", "batch"), Tokens(90_000, 20_000, 0, 1_000))
    assert (dollars(priced), priced.band) == (Decimal("0.02425"), 100_000)


def test_tier_hints_resolve_by_name_before_the_aliases(book: PriceBook) -> None:
    # OpenAI's "priority" and "flex" are tiers of gpt-5.1's own; "default" is standard.
    assert book.resolve_tier("gpt-5.1", ["priority"], model="gpt-5.1", at=READ) == "priority"
    assert book.resolve_tier("gpt-5.1", ["flex"], model="gpt-5.1", at=READ) == "flex"
    assert book.resolve_tier("gpt-5.1", ["default"], model="gpt-5.1", at=READ) == "standard"
    # Kimi has no "priority" entry: the built-in alias still makes it Highspeed.
    assert book.resolve_tier("kimi-k3.1-pro", ["priority"], model="kimi-k3.1-pro", at=READ) == "highspeed"
    found = book.resolve("kimi-k3.1-pro", "highspeed", READ)
    assert found is not None and not found.tier_fallback
    # 1,000,000 x 4 / 10^6 = 4; 100,000 x 20 / 10^6 = 2
    assert dollars(price_tokens(found.price, Tokens(1_000_000, 0, 0, 100_000))) == Decimal("6")


def test_anthropic_priority_has_no_published_price(book: PriceBook) -> None:
    # Anthropic's Priority Tier is sold as capacity commitments, with no price list: a priority
    # hint on Claude goes through the alias and falls back to standard, flagged.
    tier = book.resolve_tier("claude-haiku-5-5", ["priority"], model="claude-haiku-5-5", at=READ)
    found = book.resolve("claude-haiku-5-5", tier, READ)
    assert found is not None and found.tier_fallback and found.price.tier == "standard"
