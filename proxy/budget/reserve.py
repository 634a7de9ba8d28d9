"""A request's reservation: the most it can cost, known before it is forwarded.

SPEC "Budgets (enforced)": the input side at the highest of the input, cache-write and 1-hour
cache-write prices of its band, plus the most output it may ask for at the output price, of the
tier it asked for or of the tier its model name gives, whichever bounds higher (the answer may
not confirm the tier asked for). The input side is bounded by the body's UTF-8 byte length (a byte-level BPE
token covers at least one byte), which costs nothing to know; counting tokens would cost more
on the hot path than it saves in headroom.

A request whose model has no price (an Azure deployment name, a routing alias, no `model` at
all) may still be answered by a priced model, and then it is billed: a budget that admits it
(`allow_unpriced`) reserves it at the dearest rates any entry in force for its upstream
carries (`ceiling_case`), so that whatever the upstream answers with is bounded too.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any

from pricing import Price, PriceBook
from pricing.calculator import MAX_TOKENS, MICROS_PER_UNIT, Rates, rates, rates_for
from proxy.budget.counts import CAP, Unreadable, choices, most_output
from proxy.settings import ModelLimit

DEFAULT_MAX_OUTPUT = 32_768
MAX_RESERVATION = 10**18  # units: above any budget's limit (MAX_BUDGET_USD, 10^17 units), still one BIGINT
_MEMO = 4096


class Reserver:
    def __init__(self, book: PriceBook, limits: Sequence[ModelLimit] = ()) -> None:
        self.book = book
        self.limits = tuple((tuple(g.lower() for g in m.match), m.max_output) for m in limits)
        # Both on every gated request: the entry a (model, tier, upstream) resolves to while the
        # same entries are in force, and a model's output limit. Keys come from clients: bounded.
        self._entries: dict[tuple[str | None, str | None, str | None, int], tuple[Price, ...]] = {}
        self._outputs: dict[str | None, int] = {}
        self._ceilings: dict[tuple[str | None, int], tuple[int, int] | None] = {}

    def worst_case(self, model_requested: str | None, tier_requested: str | None, upstream: str | None,
                   request: Any, body_bytes: int, at: datetime) -> int | None:
        """Units (10^-10 USD) the request can cost at most; None when its model has no price."""
        key = (model_requested, tier_requested, upstream, self.book.epoch(at))
        try:
            prices = self._entries[key]
        except KeyError:
            prices = self._entry(model_requested, tier_requested, upstream, at)
            if len(self._entries) >= _MEMO:
                self._entries.clear()
            self._entries[key] = prices
        if not prices:
            return None
        input_side = min(body_bytes, MAX_TOKENS)
        output = min(self.max_output(model_requested, request), MAX_TOKENS)
        return max(self._bound(input_side, _per_input(r), output, r.output)
                   for r in (rates_for(p, input_side) for p in prices))

    def ceiling_case(self, model_requested: str | None, upstream: str | None, request: Any, body_bytes: int,
                     at: datetime) -> int:
        """Units a request whose model has no price can cost at most, whichever priced model the
        upstream answers with: its input side at the dearest input-side rate and its output at
        the dearest output rate of every entry in force for that upstream, any tier, any band.
        0 when no entry applies there (then no answer can be priced now)."""
        key = (upstream, self.book.epoch(at))
        if key not in self._ceilings:
            if len(self._ceilings) >= _MEMO:
                self._ceilings.clear()
            self._ceilings[key] = _ceiling(self.book.in_force(at), upstream)
        ceiling = self._ceilings[key]
        if ceiling is None:
            return 0
        input_side = min(body_bytes, MAX_TOKENS)
        return self._bound(input_side, ceiling[0], min(self.max_output(model_requested, request), MAX_TOKENS),
                           ceiling[1])

    @staticmethod
    def _bound(input_side: int, per_input: int, output: int, per_output: int) -> int:
        micros = input_side * per_input + output * per_output
        # Rounded up: a bound, never below the real cost. Past MAX_RESERVATION no budget can hold it.
        return min(-(-micros // MICROS_PER_UNIT), MAX_RESERVATION)

    def _entry(self, model_requested: str | None, tier_requested: str | None, upstream: str | None,
               at: datetime) -> tuple[Price, ...]:
        """The entries the request can be priced at: its own tier's, and the one its model name
        gives, since the meter holds the request to a cheaper tier only when the answer confirms it
        (proxy/metering/tiers.py). Empty when its model has no price."""
        model = self.book.canonical_model(None, model_requested)
        if model is None:
            return ()
        if tier_requested is not None and tier_requested.strip().lower() == "batch":
            tier_requested = None  # a synchronous request is never billed at the batch tier (the meter's rule)
        found = []
        for hint in ((tier_requested,), ()):
            tier = self.book.resolve_tier(model_requested, hint, model=model, at=at)
            entry = self.book.resolve(model, tier, at, upstream)
            if entry is not None and entry.price not in found:
                found.append(entry.price)
        return tuple(found)

    def max_output(self, model: str | None, request: Any) -> int:
        """The output the request may ask for: its own max × max(n, 1), else the model's limit."""
        asked, answers = None, 1
        if isinstance(request, dict):
            # Read as lenient upstreams read them ("200", 200.0); a request with a count no bound
            # can be read from is refused before this (proxy/budget/counts.py): the model's limit.
            try:
                asked, answers = most_output(request), choices(request)
            except Unreadable:
                asked, answers = None, CAP
        if asked is None:
            asked = self._model_limit(model)
        return asked * answers

    def _model_limit(self, model: str | None) -> int:
        found = self._outputs.get(model)
        if found is None:
            name = (model or "").lower()
            found = next((most for globs, most in self.limits if any(fnmatchcase(name, g) for g in globs)),
                         DEFAULT_MAX_OUTPUT)
            if len(self._outputs) >= _MEMO:
                self._outputs.clear()
            self._outputs[model] = found
        return found


def _per_input(r: Rates) -> int:
    return max(r.input, r.cache_read, r.cache_write, r.cache_write_1h)


def _ceiling(entries: Sequence[Price], upstream: str | None) -> tuple[int, int] | None:
    """(input-side, output) micro-units per token: the dearest of every level of every entry that
    can price an answer from `upstream` (those naming another upstream never do)."""
    levels = [r for p in entries if p.upstream is None or p.upstream == upstream for r in rates(p)]
    if not levels:
        return None
    return max(_per_input(r) for r in levels), max(r.output for r in levels)
