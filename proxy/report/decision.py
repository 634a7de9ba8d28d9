"""The decision (SPEC "Self-hosting, version 2", `decision`): keep the API, move to the cheapest
other provider of the same model, or self-host on each node profile at its `with_redundancy`
nodes, each with its monthly cost for this month's traffic and what would change the answer.

The answer is the cheapest option (the first of equals, in the order above). An option's
`flips_at` says what would make it the answer; the answer's own says what would make the
runner-up win. A self-hosted deployment's cost is the same at any load, so it wins when its
utilisation reaches measured × its cost ÷ the answer's cost (cost_curve's break-even, against
whichever option is cheapest); the API or a provider wins when its prices fall far enough.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from proxy.report.alternatives import Alternative
from proxy.report.curve import UNITS_PER_USD, monthly_cost_units, utilisation
from proxy.report.load import LoadByMinute
from proxy.report.nodes import NodeNeed
from proxy.settings import SelfHost

# The answer is "far from close" when the next option costs at least this many times as much.
FAR = 3


@dataclass(frozen=True, slots=True)
class Option:
    choice: str  # api | provider:<id> | self_host:<node>
    monthly_cost_units: int
    binding: str | None  # self_host: the limit that decides its nodes; None for the API and providers
    flips_at: str
    source: str  # where the cost comes from: measured, a price table and its date, or assumptions
    nodes: int | None = None  # self_host: its with_redundancy nodes
    utilisation: Fraction | None = None  # self_host: the month's measured utilisation of those nodes


def decision(api_units: int, load: LoadByMinute, needs: tuple[NodeNeed, ...], sh: SelfHost,
             alternative: Alternative | None = None) -> tuple[Option, ...]:
    """`alternative` is the cheapest other provider of the same model, priced for this month's
    tokens; None leaves the provider option out."""
    options = [Option("api", api_units, None, "", "measured: this month's API traffic, as billed")]
    if alternative is not None and alternative.cost_usd is not None:
        dated = f", prices from {alternative.price_date.isoformat()}" if alternative.price_date else ""
        options.append(Option(f"provider:{alternative.provider}", round(alternative.cost_usd * UNITS_PER_USD),
                              None, "", f"genai-prices for {alternative.provider_model}{dated}, this month's tokens"))
    for need in needs:
        n = need.with_redundancy
        options.append(Option(f"self_host:{need.node}", monthly_cost_units(need.profile, n, sh), need.binding, "",
                              f"assumptions: the {need.node} profile's figures and [selfhost], at {n} nodes",
                              nodes=n, utilisation=utilisation(load, need.profile, n)))
    best = min(options, key=lambda o: o.monthly_cost_units)
    words = {o.choice: _wins_if(o, best) for o in options if o is not best}
    others = sorted((o for o in options if o is not best), key=lambda o: o.monthly_cost_units)
    words[best.choice] = (f"the answer; against {others[0].choice}, {words[others[0].choice]}" if others
                          else "the only option")
    return tuple(Option(o.choice, o.monthly_cost_units, o.binding, words[o.choice], o.source, o.nodes,
                        o.utilisation) for o in options)


def answer(options: tuple[Option, ...]) -> Option | None:
    return min(options, key=lambda o: o.monthly_cost_units, default=None)


def far_from_close(options: tuple[Option, ...]) -> str | None:
    """One line when the next option costs FAR times the answer or more; None when it is close."""
    best = answer(options)
    others = sorted((o for o in options if o is not best), key=lambda o: o.monthly_cost_units)
    if best is None or not others:
        return None
    runner = others[0]
    if runner.monthly_cost_units < FAR * best.monthly_cost_units:
        return None
    ratio = (f"{runner.monthly_cost_units // best.monthly_cost_units:,}x" if best.monthly_cost_units
             else "infinitely")
    return (f"Not close: {best.choice} is the answer; the next option, {runner.choice}, costs {ratio} as much "
            "this month. The detail is below.")


def _pct(v: Fraction) -> str:
    return f"{float(v):.2%}" if v < Fraction(1, 100) else f"{float(v):,.0%}"


def _wins_if(o: Option, best: Option) -> str:
    """What would make `o` cheaper than `best`, in words."""
    if o.utilisation is not None:
        if not o.utilisation:
            return "cannot be sized: no load this month"
        if not best.monthly_cost_units:
            return "never wins while the cheapest option costs nothing"
        needed = o.utilisation * o.monthly_cost_units / best.monthly_cost_units
        you = _pct(o.utilisation)
        if needed <= 1:
            return f"self-hosting wins above {_pct(needed)} utilisation; you are at {you}"
        return f"self-hosting does not win even fully used (it would need {_pct(needed)} utilisation); you are at {you}"
    fall = 1 - Fraction(best.monthly_cost_units, o.monthly_cost_units) if o.monthly_cost_units else Fraction(0)
    who = "the API's prices" if o.choice == "api" else f"{o.choice.split(':', 1)[1]}'s prices"
    return f"wins if {who} fall by more than {_pct(fall)}"
