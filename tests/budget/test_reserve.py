"""A reservation is the most a request can cost: every spelling of its maximum output counts."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal

from pricing import Price, PriceBook
from pricing.model import Band
from proxy.budget.counts import unreadable
from proxy.budget.reserve import DEFAULT_MAX_OUTPUT, Reserver
from proxy.settings import ModelLimit

T0 = datetime(2026, 1, 1, tzinfo=UTC)
# $1 per million input tokens, $2 per million output: 10^4 and 2 x 10^4 units a token.
PRICE = Price(model="m", tier="standard", effective_from=T0, input=Decimal(1), output=Decimal(2),
              cache_read=Decimal("0.1"), cache_write=Decimal("1.25"), source="t", match=("m",))
BATCH = Price(model="m", tier="batch", effective_from=T0, input=Decimal("0.5"), output=Decimal(1),
              cache_read=Decimal("0.05"), cache_write=Decimal("0.5"), source="t", match=("m",))


def reserve(request: dict[str, object], tier: str | None = None, limits: tuple[ModelLimit, ...] = ()) -> int | None:
    return Reserver(PriceBook([PRICE, BATCH]), limits).worst_case("m", tier, None, request, 100, T0)


def test_input_at_the_dearest_input_side_price_and_output_at_the_output_price() -> None:
    # 100 bytes at cache_write's $1.25 (the highest input-side price) + 10 tokens at $2.
    assert reserve({"max_tokens": 10}) == 100 * 12_500 + 10 * 20_000


def test_the_largest_of_every_max_spelling_times_the_answers_generated() -> None:
    assert reserve({"max_tokens": 1, "max_completion_tokens": 1000}) == 100 * 12_500 + 1000 * 20_000
    assert reserve({"n_predict": 500}) == 100 * 12_500 + 500 * 20_000
    assert reserve({"max_tokens": 10, "n": 3}) == 100 * 12_500 + 30 * 20_000
    assert reserve({"max_tokens": 10, "n": 2, "best_of": 5}) == 100 * 12_500 + 50 * 20_000


def test_without_a_max_the_models_limit_or_the_default() -> None:
    assert reserve({}) == 100 * 12_500 + DEFAULT_MAX_OUTPUT * 20_000
    assert reserve({}, limits=(ModelLimit(("M*",), 64),)) == 100 * 12_500 + 64 * 20_000


def test_a_synchronous_request_asking_for_the_batch_tier_reserves_at_standard() -> None:
    assert reserve({"max_tokens": 10}, tier="batch") == reserve({"max_tokens": 10})


def test_a_model_with_no_price_has_no_bound() -> None:
    assert Reserver(PriceBook([PRICE])).worst_case("other", None, None, {}, 10, T0) is None


def test_a_model_with_no_price_is_bounded_at_the_dearest_rates_its_upstream_can_be_billed_at() -> None:
    # Input side: the band's cache write at $4; output: another model's $9; the $100 entry of
    # another upstream and the entry not yet in force never price an answer from "up".
    banded = replace(PRICE, model="b", match=("b",), bands=(Band(1000, cache_write=Decimal(4)),))
    other = replace(PRICE, model="o", match=("o",), output=Decimal(9))
    elsewhere = replace(PRICE, model="e", match=("e",), input=Decimal(100), output=Decimal(100), upstream="x")
    later = replace(PRICE, model="l", match=("l",), output=Decimal(100),
                    effective_from=datetime(2027, 1, 1, tzinfo=UTC))
    r = Reserver(PriceBook([PRICE, banded, other, elsewhere, later]))
    assert r.ceiling_case("deployment-7", "up", {"max_tokens": 10, "n": 2}, 100, T0) == 100 * 40_000 + 20 * 90_000
    assert r.ceiling_case(None, "x", {"max_tokens": 10}, 100, T0) == 100 * 1_000_000 + 10 * 1_000_000
    assert Reserver(PriceBook([elsewhere])).ceiling_case("m", "up", {}, 100, T0) == 0


def test_counts_are_read_as_lenient_upstreams_read_them() -> None:
    # pydantic-typed servers (vLLM) coerce "200" and 200.0 to 200 answers; C++ servers truncate a
    # float. Each spelling reserves what the integer does; a fraction rounds up, never down.
    two_hundred = reserve({"max_tokens": 10, "n": 200})
    assert two_hundred == 100 * 12_500 + 2000 * 20_000
    for n in ("200", 200.0, " 200 ", "2e2", "200.0", Decimal("200"), 199.5, "199.01"):
        assert reserve({"max_tokens": 10, "n": n}) == two_hundred, n
    assert reserve({"max_tokens": 10, "best_of": "200"}) == two_hundred
    for spelling in ("max_tokens", "max_completion_tokens", "max_output_tokens", "n_predict"):
        assert reserve({spelling: "1000"}) == reserve({spelling: 1000.0}) == 100 * 12_500 + 1000 * 20_000
    assert reserve({"max_tokens": 10, "n": True}) == reserve({"max_tokens": 10})  # pydantic reads true as 1
    assert reserve({"max_tokens": "0", "n": "-3"}) == reserve({})  # no limit, one answer: as before


def test_a_count_no_upstream_reads_as_a_number_is_unreadable() -> None:
    assert unreadable({"n": "200", "max_tokens": 1.5, "best_of": None, "n_predict": True}) is None
    for bad in ("two hundred", "nan", "Infinity", [200], {"n": 200}, float("inf"), "9" * 65):
        assert unreadable({"max_tokens": 10, "n": bad}) == "n", bad
    assert unreadable({"max_completion_tokens": "lots"}) == "max_completion_tokens"
