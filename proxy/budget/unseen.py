"""What an enforced budget counts for a request whose usage llmmeter never saw (issue 32, item 1).

A client that hangs up before a stream's usage chunk, an upstream that cuts the stream or
times out, an upstream that reports no usage: llmmeter estimates the tokens from the text it
relayed, and the provider bills what it generated, reasoning included, which no relayed text
shows. An estimate from what was relayed can be a thousandth of the bill. So such a request's
cost is its reservation, the worst case it was admitted under, whenever its estimate is below
it: the budget can never count less than the provider may bill for what the request asked for.
Its tokens stay the estimate (usage_source `estimated`), and the flag says the cost is the
reservation's. The meter applies this when it records, `llmmeter reprice` when it reprices.

Reading the upstream on to its usage after the client left would make the provider generate
(and bill) the rest of an answer nobody reads, for as long as the answer takes; a provider stops
a generation whose connection closes, and bills what it generated until then.
"""

from __future__ import annotations

from proxy.ledger.record import Record

USAGE_UNSEEN = "usage_unseen"
OVER_RESERVATION = "over_reservation"
# Outcomes after which the upstream may have generated (and billed) what llmmeter never saw.
_CUT = frozenset({"client_closed", "upstream_reset", "upstream_timeout"})


def unseen(rec: Record) -> bool:
    """The upstream never reported this request's usage (or only its input side)."""
    return rec.usage_source == "estimated" or ("no_usage" in rec.flags and rec.outcome in _CUT)


def settle(rec: Record) -> int:
    """For a priced record an enforced budget admitted: flag it `over_reservation` when it cost
    more than its reservation, or raise its cost to its reservation when its usage was unseen
    (flag `usage_unseen`). The units added to its cost (0 when none)."""
    if not rec.budget_leases or rec.cost_units is None:
        return 0
    reserved = rec.reserved_units or 0
    if rec.cost_units > reserved:
        rec.flags.append(OVER_RESERVATION)  # its excess is counted per budget when it settles
        return 0
    if not unseen(rec):
        return 0
    added = reserved - rec.cost_units
    rec.cost_units = reserved
    rec.flags.append(USAGE_UNSEEN)
    return added
