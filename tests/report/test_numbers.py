"""Numbers as the md and html formats write them: never `$0.00` for money that is not zero, never `1e+09`."""

from __future__ import annotations

from decimal import Decimal

import pytest

from proxy.report.formats.svg import nice_ticks
from proxy.report.numbers import compact, count, money, money_compact, money_decimal, money_ticks, percent, tokens

CENT = 10**8  # 10^-10 USD units in a cent


@pytest.mark.parametrize(("units", "text"), [
    (0, "$0.00"), (CENT, "$0.01"), (867_812_345_678, "$86.78"), (559_613_333_333_333, "$55,961.33"),
    (8 * 10**6, "$0.0008"), (812_345, "$0.000081"), (1, "$0.0000000001"), (CENT // 2, "$0.005"),
    (CENT // 2 + 1, "$0.01"), (10**40, "$1,000,000,000,000,000,000,000,000,000,000.00"), (-3 * CENT, "-$0.03"),
])
def test_money_keeps_a_non_zero_amount_off_zero(units: int, text: str) -> None:
    assert money(units) == text


def test_money_half_a_cent_rounds_to_even_and_stays_visible() -> None:
    # 0.005 rounds (half to even) to 0.00, so it is written with its own digits instead.
    assert money_decimal(Decimal("0.005")) == "$0.005" and money_decimal(Decimal("0.015")) == "$0.02"


@pytest.mark.parametrize(("value", "text"), [
    (0, "0"), (950, "950"), (12_500, "12.5 k"), (999_600, "1 M"), (39_617_685, "39.6 M"),
    (1_355_002_117, "1.36 B"), (5e11, "500 B"), (2.5e13, "25 T"), (0.5, "0.5"),
])
def test_compact_numbers_have_no_exponent(value: float, text: str) -> None:
    assert compact(value) == text
    assert "e" not in compact(value).lower().replace(" ", "")


def test_tokens_count_and_percent() -> None:
    assert tokens(1_355_002_117) == "1.36 B tokens"
    assert count(1_355_002_117) == "1,355,002,117"
    assert percent(0.3949) == "39.5%" and percent(0.0) == "0.0%" and percent(0.0001) == "<0.1%"


def test_money_on_axes_is_one_style_per_axis() -> None:
    assert money_ticks([0, 20_000, 40_000]) == ["$0", "$20,000", "$40,000"]
    assert money_ticks([0, 0.5, 1.0]) == ["$0.00", "$0.50", "$1.00"]
    assert money_ticks([0, 2e6]) == ["$0", "$2 M"]
    assert money_compact(86.78) == "$86.78" and money_compact(55_961.33) == "$55,961"


@pytest.mark.parametrize(("top", "ticks"), [
    (3.96, [0, 1, 2, 3, 4]), (86.78, [0, 20, 40, 60, 80, 100]), (0, [0, 1]),
    (30_512_250_009 * 1.2, [0, 1e10, 2e10, 3e10, 4e10]),
])
def test_ticks_are_round_numbers_reaching_the_top(top: float, ticks: list[float]) -> None:
    assert nice_ticks(top) == ticks


@pytest.mark.parametrize(("top", "labels"), [
    (0.00095, ["$0.0000", "$0.0002", "$0.0004", "$0.0006", "$0.0008", "$0.0010"]),
    (0.12, ["$0.000", "$0.025", "$0.050", "$0.075", "$0.100", "$0.125"]),
    (0.000_000_35, ["$0.0000000", "$0.0000001", "$0.0000002", "$0.0000003", "$0.0000004"]),
    (3.96, ["$0", "$1", "$2", "$3", "$4"]),
    (0.9, ["$0.00", "$0.20", "$0.40", "$0.60", "$0.80", "$1.00"]),
])
def test_money_ticks_get_the_decimals_their_step_needs(top: float, labels: list[str]) -> None:
    """A $0.00095 axis read "$0.00" on every tick: each label now tells its tick apart from the next."""
    ticks = nice_ticks(top)
    assert money_ticks(ticks) == labels
    assert len(set(money_ticks(ticks))) == len(ticks)


def test_html_cost_axis_of_a_tiny_month_never_reads_zero() -> None:
    from dataclasses import replace

    from proxy.report import render
    from tests.report.dom import Page
    from tests.report.factory import worked_report

    r = worked_report()
    tiny = 9_500_000  # $0.00095 in 10^-10 USD units
    days = tuple(replace(d, cost_by_model_tier=(("kimi-k3.1-pro/standard", tiny),)) if d.cost_by_model_tier else d
                 for d in r.daily)
    page = Page(render(replace(r, daily=days), "html"))
    ticks = next(c for c in page.charts if c.name == "daily-cost").texts["y-tick"]
    assert ticks == ["$0.0000", "$0.0002", "$0.0004", "$0.0006", "$0.0008", "$0.0010"]
