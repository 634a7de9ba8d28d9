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

import math
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
        dated = (f", prices from {alternative.price_date.isoformat()}" if alternative.price_date
                 else ", prices undated in genai-prices")
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
    """One line when the answer is far from close: the next option costs FAR times the answer or more,
    or, when the answer is not self-hosting and another option is near it, the cheapest self-hosted
    one does (the question llmmeter's report is for). None when neither is."""
    best = answer(options)
    others = sorted((o for o in options if o is not best), key=lambda o: o.monthly_cost_units)
    if best is None or not others:
        return None
    runner = others[0]
    if _far(runner, best):
        return (f"Not close: {best.choice} is the answer; the next option, {runner.choice}, costs "
                f"{_times(runner, best)} as much this month. The detail is below.")
    hosted = [o for o in others if o.nodes is not None]
    if best.nodes is None and hosted and _far(hosted[0], best):
        return (f"Self-hosting is not close: its cheapest option, {hosted[0].choice}, costs {_times(hosted[0], best)} "
                f"as much as the answer, {best.choice}, this month; {best.choice} against {runner.choice} is the "
                "close call. The detail is below.")
    return None


def _far(o: Option, best: Option) -> bool:
    return o.monthly_cost_units >= FAR * best.monthly_cost_units


def _times(o: Option, best: Option) -> str:
    return f"{o.monthly_cost_units // best.monthly_cost_units:,}x" if best.monthly_cost_units else "infinitely"


def _pct(v: Fraction) -> str:
    """A percentage: whole from 1%, else two significant digits (0.11%, 0.00010%), never a 0 that is not."""
    if v >= Fraction(1, 100):
        return f"{float(v):,.0%}"
    if not v:
        return "0%"
    places = max(2, 1 - math.floor(math.log10(v * 100)))
    return f"{float(v * 100):.{places}f}%"


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
        # Fully used, a token costs needed x what it costs on the answer.
        full = f"{float(needed):,.1f}x" if needed < 10 else f"{math.floor(needed):,}x"
        return (f"self-hosting does not win even fully used (a token would still cost {full} the answer's); "
                f"you are at {you}")
    who = "the API's prices" if o.choice == "api" else f"{o.choice.split(':', 1)[1]}'s prices"
    share = Fraction(best.monthly_cost_units, o.monthly_cost_units) if o.monthly_cost_units else Fraction(1)
    if share < Fraction(1, 100):  # "fall by more than 100%" would read as impossible
        return f"wins if {who} fall to under {_pct(share)} of today's"
    return f"wins if {who} fall by more than {_pct(1 - share)}"
