"""cost_curve in the report, from the seeded month (tests/ledger/seeded_load.py) on SQLite and
PostgreSQL, checked against a computation written here from the records and the second-by-second
simulation: the deployment's monthly cost, the API's price per million tokens, the measured and
break-even utilisations and every point of the curve; and in every format."""

from __future__ import annotations

import csv
import io
import json
import math
import random
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from pricing import PriceBook
from proxy.ledger.store import open_store
from proxy.ledger.store.minutes import MinuteLoad
from proxy.report import ReportInput, build_report, render
from proxy.report.curve import utilisation
from proxy.report.load import FIGURES, LoadByMinute
from proxy.report.nodes import LIMITS
from proxy.settings import NodeProfile, SelfHost
from tests.ledger.seeded_load import epoch_minute, seeded_month, simulate
from tests.report.test_load_by_minute import LOCAL_END, LOCAL_START, TZ, seeded

# Small nodes, so the seeded month uses a visible share of them; the first is the cheaper at
# its nodes with redundancy, and prices capex, amortisation, power and ops.
CHEAP = NodeProfile("cheap", "test", kv_cache_tokens=400_000, prefill_tokens_per_s=20_000, decode_tokens_per_s=2_000,
                    capex_usd=Decimal("0.18"), power_kw=Decimal("0.00005"))
DEAR = NodeProfile("dear", "test", kv_cache_tokens=400_000, prefill_tokens_per_s=20_000, decode_tokens_per_s=2_000,
                   rent_usd_per_month=Decimal("1"))
# No model of this ledger has an equivalent provider here: the decision weighs the API and self-hosting
# (tests/report/test_alternatives.py checks the provider option).
NO_PROVIDER = (("a-model-not-in-this-ledger", ("together:moonshotai/Kimi-K3.1-Pro",)),)
SELFHOST = SelfHost(node_profiles=(DEAR, CHEAP), amortization_months=36, usd_per_kwh=Decimal("0.12"),
                    ops_usd_per_month=Decimal("0.001"), equivalents=NO_PROVIDER)
LIVE = ("chat", "completions", "embeddings", "responses", "messages")


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    found: str = request.getfixturevalue("pg_url")
    return found


def report(url: str, sh: SelfHost = SELFHOST) -> Any:
    inp = ReportInput(month="2026-11", tz=TZ, book=PriceBook([]), selfhost=sh,
                      workload_bounds=(4096, 32768, 131072), now=datetime(2026, 12, 15, tzinfo=UTC))
    return build_report(open_store(url, read_only=True), inp)


def half_even(x: Fraction, places: int = 10) -> Decimal:
    """x to `places` decimals, half to even, by integer arithmetic."""
    scaled = x * 10**places
    low = math.floor(scaled)
    rest = scaled - low
    n = low + (1 if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and low % 2) else 0)
    return Decimal(n).scaleb(-places)


def expected() -> dict[str, Any]:
    records = [r for r in seeded_month() if LOCAL_START <= r.start < LOCAL_END]
    billed = [r for r in records if r.endpoint in (*LIVE, "batch")]
    api_usd = Fraction(sum(r.cost_units for r in billed), 10**10)
    api_tokens = sum(r.input_tokens + r.cache_read_tokens + r.cache_write_tokens + r.output_tokens for r in billed)
    sim = simulate(seeded_month())
    minutes = range(epoch_minute(LOCAL_START), epoch_minute(LOCAL_END))
    loads = [(x.kv_token_s / 60, x.prefill / 60, x.decode / 60) for m in minutes if (x := sim.get(m))]
    caps = (CHEAP.kv_cache_tokens, CHEAP.prefill_tokens_per_s, CHEAP.decode_tokens_per_s)
    n = max(math.ceil(max(load[i] for load in loads) / caps[i]) for i in range(3)) + 1
    cheap = n * (Fraction("0.18") / 36 + Fraction("0.00005") * 730 * Fraction("0.12")) + Fraction("0.001")
    assert cheap < n * 1 + Fraction("0.001")  # DEAR costs more at the same nodes
    measured = sum(max(load[i] / (n * caps[i]) for i in range(3)) for load in loads) / len(minutes)
    return {"nodes": n, "monthly": cheap, "api_usd": api_usd, "api_tokens": api_tokens, "measured": measured,
            "api_per_mtok": api_usd * 10**6 / api_tokens,
            "at": lambda u: cheap * 10**6 / (api_tokens * u / measured),  # the same cost over the tokens at u
            "breakeven": measured * cheap / api_usd}


def test_the_curve_is_the_independent_computation(url: str) -> None:
    seeded(url)
    d = json.loads(render(report(url), "json"))["cost_curve"]
    want = expected()
    assert (d["node"], d["nodes"]) == ("cheap", want["nodes"]) and want["nodes"] > 2
    assert Decimal(d["monthly_cost_usd"]) == half_even(want["monthly"])
    assert Decimal(d["api_cost_usd"]) == half_even(want["api_usd"]) and d["api_tokens"] == want["api_tokens"]
    assert Decimal(d["api_usd_per_mtok"]) == half_even(want["api_per_mtok"])
    # The minute table rounds each record's share of a minute to 10^-3 token: utilisations agree to 10^-6.
    assert d["measured_utilisation"] == pytest.approx(float(want["measured"]), abs=1e-6)
    assert 0 < d["measured_utilisation"] < 1
    assert d["breakeven_utilisation"] == pytest.approx(float(want["breakeven"]), rel=1e-4)
    assert [p["utilisation"] for p in d["points"]] == [i / 20 for i in range(1, 21)]
    for p in d["points"]:
        got = Decimal(p["self_hosted_usd_per_mtok"])
        exact = want["at"](Fraction(p["utilisation"]).limit_denominator(20))
        assert abs(Fraction(got) - exact) <= exact * Fraction(1, 10**4) + Fraction(1, 10**10), p
    # At the measured utilisation the deployment serves exactly this month's tokens: no rounding of utilisation.
    assert Decimal(d["self_hosted_usd_per_mtok_at_measured"]) == half_even(want["monthly"] * 10**6 / want["api_tokens"])


def test_no_load_and_no_api_tokens_give_no_curve(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    store = open_store(url)
    store.migrate()
    d = json.loads(render(report(url), "json"))["cost_curve"]
    assert d["points"] == [] and d["api_usd_per_mtok"] is None and d["breakeven_utilisation"] is None
    assert d["measured_utilisation"] == 0 and d["node"] == "cheap" and d["nodes"] == 1
    md = render(report(url), "md")
    assert "## Cost per million tokens by utilisation" in md and "nothing to put on a curve" in md


def test_every_format_carries_the_curve(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    seeded(url)
    r = report(url)
    rows = [x for x in csv.DictReader(io.StringIO(render(r, "csv"))) if x["section"] == "cost_curve"]
    d = json.loads(render(r, "json"))["cost_curve"]
    assert [(x["utilisation"], x["self_hosted_usd_per_mtok"]) for x in rows] == [
        (str(p["utilisation"]), p["self_hosted_usd_per_mtok"]) for p in d["points"]]
    assert {x["api_usd_per_mtok"] for x in rows} == {d["api_usd_per_mtok"]}
    assert {x["breakeven_utilisation"] for x in rows} == {str(d["breakeven_utilisation"])}
    md = render(r, "md")
    assert "## Cost per million tokens by utilisation" in md and "self-hosting is cheaper above" in md
    html = render(r, "html")
    assert 'data-chart="cost-curve"' in html and 'data-section="cost_curve"' in html
    assert "you: " in html and "break-even: " in html


def test_a_deployment_that_never_breaks_even_says_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    seeded(url)
    d = json.loads(render(report(url, SelfHost()), "json"))["cost_curve"]  # the shipped profiles
    assert d["node"] == "8xB300-vllm-fp8" and d["breakeven_utilisation"] > 1
    assert "self-hosting never matches the API on this deployment" in render(report(url, SelfHost()), "md")


def test_utilisation_is_exactly_the_mean_of_each_minutes_largest_share() -> None:
    """utilisation() sums scaled integers and divides by the nodes once; held here to its definition,
    a Fraction per minute and per limit, on awkward capacities and node counts."""
    rng = random.Random(7)
    rows = tuple(MinuteLoad(m, rng.randrange(10**8), rng.randrange(10**9), rng.randrange(10**8),
                            rng.randrange(10**10)) for m in range(500))
    load = LoadByMinute(minutes=1440, rows=rows)  # idle minutes count in the mean too
    for profile in (CHEAP, NodeProfile("odd", "test", kv_cache_tokens=999_983, prefill_tokens_per_s=7_919,
                                       decode_tokens_per_s=104_729)):
        for nodes in (1, 2, 3, 7):
            want = sum(max(Fraction(getattr(row, FIGURES[figure][0]),
                                    FIGURES[figure][1] * nodes * getattr(profile, capacity))
                           for _, figure, capacity in LIMITS) for row in rows) / 1440
            assert utilisation(load, profile, nodes) == want, (profile.name, nodes)
    assert utilisation(LoadByMinute(), CHEAP, 2) == 0
