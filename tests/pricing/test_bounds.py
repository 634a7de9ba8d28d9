"""The caps money is sized for: a price ceiling the loader enforces with file:line, token counts
of at most 10^9 per category, and arithmetic that never raises a decimal signal and rounds once."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pricing import Cost, Tokens, cost, format_usd, price_parts, price_tokens, usd
from pricing.calculator import (
    MAX_COST_UNITS,
    MAX_FEE_CALLS,
    MAX_FEE_PER_1K,
    MAX_FEE_RATE,
    MAX_FEE_UNIT,
    MAX_PRICE_PER_MILLION,
    MAX_RATE,
    MAX_TOKENS,
    MAX_UNIT_PRICE,
    MICROS_PER_UNIT,
    UNITS_PER_USD,
    fee_rate,
    round_micros,
    token_rate,
)
from pricing.loader import check_dir, load_dir
from pricing.model import BILLING_TYPES, FEE_TYPES, Band, Price
from proxy.protocol import usage

ROOT = Path(__file__).resolve().parents[2]
TABLE = """\
[[price]]
model = "m"
tier = "standard"
effective_from = 2026-10-23T00:00:00Z
input = "{input}"
output = "10.00"
cache_read = "0.20"
cache_write = "2.00"
source = "test"
"""


def at_the_ceiling(bands: tuple[Band, ...] = ()) -> Price:
    top = MAX_PRICE_PER_MILLION
    return Price(model="m", tier="standard", effective_from=datetime(2026, 1, 1, tzinfo=UTC), input=top,
                 output=top, cache_read=top, cache_write=top, cache_write_1h=top, web_search_per_1k=MAX_FEE_PER_1K,
                 bands=bands, source="t")


AT_THE_CAPS = Tokens(MAX_TOKENS, MAX_TOKENS, MAX_TOKENS, MAX_TOKENS, MAX_TOKENS, MAX_FEE_CALLS)


def test_the_caps_are_the_documented_ones_and_agree_with_the_usage_readers() -> None:
    assert Decimal(1_000_000) == MAX_PRICE_PER_MILLION
    assert MAX_UNIT_PRICE == UNITS_PER_USD and MICROS_PER_UNIT == 10**6  # $1 a token; micro-units of 10^-16 USD
    assert MAX_RATE == token_rate(MAX_PRICE_PER_MILLION) == MAX_UNIT_PRICE * MICROS_PER_UNIT
    assert MAX_TOKENS == usage.MAX_TOKENS == 10**9  # proxy/protocol/usage.py refuses counts above it
    assert MAX_FEE_CALLS == 10**5  # the usage readers refuse more calls as garbage
    assert MAX_FEE_UNIT == 1000 * UNITS_PER_USD  # $1,000 a call
    assert MAX_FEE_RATE == fee_rate(MAX_FEE_PER_1K) == MAX_FEE_UNIT * MICROS_PER_UNIT
    # Five token categories at the ceiling, plus the most calls at the most a call can cost: $5.1e9 a record.
    assert len(BILLING_TYPES) == 5 and FEE_TYPES == ("web_search",)
    assert MAX_COST_UNITS == 5 * MAX_TOKENS * MAX_UNIT_PRICE + MAX_FEE_CALLS * MAX_FEE_UNIT == 5 * 10**19 + 10**18


@pytest.mark.parametrize("value", ["1000000.0001", "1000001", "1e999999999", "1E+7", "99999999999999999999"])
def test_a_price_above_the_ceiling_is_refused_with_file_and_line(tmp_path: Path, value: str) -> None:
    (tmp_path / "t.toml").write_text(TABLE.format(input=value))
    [error] = check_dir(tmp_path)
    assert error.startswith(f"{tmp_path / 't.toml'}:5: input ") and "above the ceiling of 1,000,000 USD" in error


@pytest.mark.parametrize(("value", "exact"), [("1000000", 1_000_000), ("1E+3", 1000), ("0E+999999", 0),
                                               ("0.0001", Decimal("0.0001"))])
def test_prices_up_to_the_ceiling_load_with_an_ordinary_exponent(tmp_path: Path, value: str,
                                                                exact: Decimal | int) -> None:
    (tmp_path / "t.toml").write_text(TABLE.format(input=value))
    [p] = load_dir(tmp_path)
    assert p.input == exact and p.input.as_tuple().exponent <= 0  # type: ignore[operator]
    assert token_rate(p.input) == int(Decimal(exact) * 10**10)


def test_prices_check_names_the_file_and_line_of_a_price_above_the_ceiling(tmp_path: Path) -> None:
    (tmp_path / "t.toml").write_text(TABLE.format(input="1e999999999"))
    done = subprocess.run([sys.executable, "-m", "proxy", "prices", "check", str(tmp_path)], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"{tmp_path / 't.toml'}:5: input '1e999999999' is above the ceiling" in done.stderr


@given(st.one_of(st.decimals(allow_nan=True, allow_infinity=True),
                 st.builds(lambda c, e: Decimal(f"{c}E{e}"), st.integers(-(10**30), 10**30),
                           st.integers(-999_999_999, 999_999_999))))
def test_a_rate_is_an_int_or_a_value_error_never_a_decimal_signal(d: Decimal) -> None:
    for rate, scale, top in ((token_rate, 10**10, MAX_RATE), (fee_rate, 10**13, MAX_FEE_RATE)):
        try:
            micros = rate(d)
        except ValueError:
            continue
        assert type(micros) is int and 0 <= micros <= top and Decimal(micros) == d * scale


def test_a_record_at_the_caps_costs_exactly_the_documented_maximum() -> None:
    top = MAX_TOKENS * MAX_UNIT_PRICE
    priced = price_tokens(at_the_ceiling(), AT_THE_CAPS)
    assert priced.cost == Cost(top, top, top, top, top, MAX_FEE_CALLS * MAX_FEE_UNIT) and priced.flags == ()
    assert priced.cost.total == MAX_COST_UNITS
    assert format_usd(priced.cost.total) == "5100000000" and usd(priced.cost.total) == Decimal(51 * 10**8)
    # Version-1 arithmetic, four categories, stays under it.
    assert cost(at_the_ceiling(), *(MAX_TOKENS,) * 4).total == 4 * top < MAX_COST_UNITS
    for over in ((MAX_TOKENS + 1, 0, 0, 0), (0, 0, 0, MAX_TOKENS + 1), (-1, 0, 0, 0)):
        with pytest.raises(ValueError, match="token counts must be 0 to 1000000000"):
            cost(at_the_ceiling(), *over)
        with pytest.raises(ValueError, match="token counts must be 0 to 1000000000"):
            price_tokens(at_the_ceiling(), Tokens(*over))
    for tokens in (Tokens(0, 0, 0, 0, MAX_TOKENS + 1), Tokens(0, 0, 0, 0, -1)):
        with pytest.raises(ValueError, match="token counts must be 0 to 1000000000"):
            price_tokens(at_the_ceiling(), tokens)
    for calls in (MAX_FEE_CALLS + 1, -1):
        with pytest.raises(ValueError, match="web search calls must be 0 to 100000"):
            price_tokens(at_the_ceiling(), Tokens(0, 0, 0, 0, 0, calls))


def test_bands_and_iterations_stay_within_the_maximum() -> None:
    # A band picks other prices under the same ceiling: the cost at the caps is the same maximum.
    banded = at_the_ceiling((Band(1, input=Decimal(1)), Band(2 * MAX_TOKENS, output=MAX_PRICE_PER_MILLION)))
    priced = price_tokens(banded, AT_THE_CAPS)
    assert priced.band == 2 * MAX_TOKENS and priced.cost.total == MAX_COST_UNITS
    # Iterations priced apart share the per-category caps: their sums cannot pass them.
    half = Tokens(*(MAX_TOKENS // 2,) * 5, MAX_FEE_CALLS // 2)
    assert price_parts(at_the_ceiling(), [half, half]).cost.total == MAX_COST_UNITS
    with pytest.raises(ValueError, match="parts sum to more than"):
        price_parts(at_the_ceiling(), [half, half, Tokens(1, 0, 0, 0)])
    with pytest.raises(ValueError, match="parts sum to more than"):
        price_parts(at_the_ceiling(), [half, half, Tokens(0, 0, 0, 0, 0, 1)])


def test_dollars_are_exact_at_any_size() -> None:
    # A month at the caps (744 hours of 9.2e8 records, each 5.1e19 units) is a 31-digit number of units.
    huge = 744 * 922_337_203 * MAX_COST_UNITS + 1
    assert format_usd(huge) == str(huge)[:-10] + "." + str(huge)[-10:]
    assert usd(10**30 + 1) == Decimal("100000000000000000000.0000000001")
    assert format_usd(-5) == "-0.0000000005" and format_usd(0) == "0" and format_usd(10**10) == "1"


# --- Ten decimal places: exact in micro-units (10^-16 USD), rounded half-even once per record. ---

def fine(inp: str = "0.0000000001", out: str = "0.0000000001", fee: str | None = None,
         bands: tuple[Band, ...] = ()) -> Price:
    return Price(model="m", tier="standard", effective_from=datetime(2026, 1, 1, tzinfo=UTC), input=Decimal(inp),
                 output=Decimal(out), cache_read=Decimal(0), cache_write=Decimal(0),
                 web_search_per_1k=None if fee is None else Decimal(fee), bands=bands, source="t")


def test_ten_decimal_places_load_and_eleven_are_refused(tmp_path: Path) -> None:
    (tmp_path / "t.toml").write_text(TABLE.format(input="0.0000000001"))
    [p] = load_dir(tmp_path)
    assert token_rate(p.input) == 1  # $10^-10 per million tokens: 10^-16 USD, one micro-unit, a token
    (tmp_path / "t.toml").write_text(TABLE.format(input="0.00000000001"))
    [error] = check_dir(tmp_path)
    assert error == f"{tmp_path / 't.toml'}:5: input '0.00000000001' has more than 10 decimal places"
    with pytest.raises(ValueError, match="more than 10 decimal places"):
        token_rate(Decimal("0.00000000001"))


@pytest.mark.parametrize(("tokens", "units"), [
    (499_999, 0), (500_000, 0), (500_001, 1),  # half a unit: to the even 0
    (1_499_999, 1), (1_500_000, 2), (2_500_000, 2), (3_500_000, 4),  # halves go to the even neighbour
])
def test_a_record_is_rounded_half_even_to_a_unit(tokens: int, units: int) -> None:
    # One micro-unit a token: the exact cost is tokens / 10^6 units.
    assert price_tokens(fine(), Tokens(tokens, 0, 0, 0)).cost.total == units
    assert cost(fine(), tokens, 0, 0, 0).total == units
    assert round_micros(tokens) == units


def test_the_record_is_rounded_once_not_per_category() -> None:
    # 0.3 units of input and 0.3 of output: rounded apart each is 0; the record's 0.6 is 1.
    priced = price_tokens(fine(), Tokens(300_000, 0, 0, 300_000))
    assert priced.cost.total == 1
    # The categories split that one rounding (running sums: round(0.3) = 0, round(0.6) = 1).
    assert priced.cost == Cost(input=0, cache_read=0, cache_write=0, output=1)
    assert cost(fine(), 300_000, 0, 0, 300_000) == priced.cost


def test_iterations_are_summed_exactly_and_rounded_once() -> None:
    # Two passes of 0.3 units each: 0 + 0 if each were rounded, 0.6 -> 1 as one record.
    part = Tokens(300_000, 0, 0, 0)
    assert price_tokens(fine(), part).cost.total == 0
    assert price_parts(fine(), [part, part]).cost.total == 1


def test_a_fee_with_ten_decimal_places_is_exact_too() -> None:
    # $10^-10 per 1,000 calls is 10^-13 USD, 10^-3 units, a call: 1,500 calls are 1.5 units, to the even 2.
    p = fine(inp="0", out="0", fee="0.0000000001")
    assert fee_rate(Decimal("0.0000000001")) == 1000
    assert price_tokens(p, Tokens(0, 0, 0, 0, 0, 1_500)).cost == Cost(0, 0, 0, 0, 0, 2)
    assert price_tokens(p, Tokens(0, 0, 0, 0, 0, 500)).cost.total == 0
    # Tokens and fees are rounded together: 0.4 units of tokens and 0.2 of fees make 1 (0.6).
    q = fine(out="0", fee="0.0000000001")
    priced = price_tokens(q, Tokens(400_000, 0, 0, 0, 0, 200))
    assert priced.cost.total == 1 and priced.cost.fees == 1 and priced.cost.input == 0


DECIMAL_PRICE = st.builds(lambda n: Decimal(n).scaleb(-10), st.integers(0, 10**16))  # 0 to $10^6, 10 places
COUNT = st.integers(0, MAX_TOKENS)


@given(st.lists(DECIMAL_PRICE, min_size=6, max_size=6), st.lists(COUNT, min_size=5, max_size=5),
       st.integers(0, MAX_FEE_CALLS), st.integers(0, 10**12))
def test_any_ten_decimal_prices_cost_the_exact_sum_rounded_half_even_within_the_maximum(
        prices: list[Decimal], counts: list[int], calls: int, fee_micros: int) -> None:
    fee_per_1k = min(Decimal(fee_micros).scaleb(-6) * prices[5], MAX_FEE_PER_1K).quantize(Decimal("1E-10"))
    p = Price(model="m", tier="standard", effective_from=datetime(2026, 1, 1, tzinfo=UTC), input=prices[0],
              cache_read=prices[1], cache_write=prices[2], output=prices[3], cache_write_1h=prices[4],  # Tokens order
              web_search_per_1k=fee_per_1k, source="t")
    t = Tokens(counts[0], counts[1], counts[2], counts[3], counts[4], calls)
    priced = price_tokens(p, t)
    # USD: tokens × price / 10^6, calls × fee / 10^3; in units × 10^10; rounded half-even once.
    exact = (sum((Decimal(n) * x for n, x in zip(counts, prices[:5], strict=True)), Decimal(0)) * 10**4
             + Decimal(calls) * fee_per_1k * 10**7)
    want = int(exact.to_integral_value(rounding="ROUND_HALF_EVEN"))
    assert priced.cost.total == want <= MAX_COST_UNITS
    # Each category is within one unit of its own exact value, and none is negative.
    for got, n, x in ((priced.cost.input, t.input, p.input), (priced.cost.output, t.output, p.output),
                      (priced.cost.web_search, calls * 1000, fee_per_1k)):
        assert got >= 0 and abs(got - Decimal(n) * x * 10**4) <= 1


def test_the_maximum_holds_just_under_the_ceiling_with_ten_decimal_places() -> None:
    top = Decimal("999999.9999999999")
    p = replace(at_the_ceiling(), input=top, output=top, cache_read=top, cache_write=top, cache_write_1h=top,
                web_search_per_1k=top)
    total = price_tokens(p, AT_THE_CAPS).cost.total
    # Each token category is 10^9 × (10^10 − 10^-6) units, the fee 10^5 × (10^13 − 10^-3): just under.
    assert total == MAX_COST_UNITS - 5 * 10**3 - 10**2 < MAX_COST_UNITS
