"""The caps money is sized for: a price ceiling the loader enforces with file:line, token counts
of at most 10^9 per category, and arithmetic that never raises a decimal signal or rounds."""

from __future__ import annotations

import subprocess
import sys
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
    MAX_FEE_UNIT,
    MAX_PRICE_PER_MILLION,
    MAX_TOKENS,
    MAX_UNIT_PRICE,
    UNITS_PER_USD,
    fee_unit_price,
    unit_price,
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
    assert MAX_UNIT_PRICE == unit_price(MAX_PRICE_PER_MILLION) == UNITS_PER_USD  # $1 a token
    assert MAX_TOKENS == usage.MAX_TOKENS == 10**9  # proxy/protocol/usage.py refuses counts above it
    assert MAX_FEE_CALLS == 10**5  # the usage readers refuse more calls as garbage
    assert MAX_FEE_UNIT == fee_unit_price(MAX_FEE_PER_1K) == 1000 * UNITS_PER_USD  # $1,000 a call
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
    assert unit_price(p.input) == int(Decimal(exact) * 10**4)


def test_prices_check_names_the_file_and_line_of_a_price_above_the_ceiling(tmp_path: Path) -> None:
    (tmp_path / "t.toml").write_text(TABLE.format(input="1e999999999"))
    done = subprocess.run([sys.executable, "-m", "proxy", "prices", "check", str(tmp_path)], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"{tmp_path / 't.toml'}:5: input '1e999999999' is above the ceiling" in done.stderr


@given(st.one_of(st.decimals(allow_nan=True, allow_infinity=True),
                 st.builds(lambda c, e: Decimal(f"{c}E{e}"), st.integers(-(10**30), 10**30),
                           st.integers(-999_999_999, 999_999_999))))
def test_unit_price_is_an_int_or_a_value_error_never_a_decimal_signal(d: Decimal) -> None:
    try:
        units = unit_price(d)
    except ValueError:
        return
    assert type(units) is int and 0 <= units <= MAX_UNIT_PRICE and Decimal(units) == d * 10**4


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
