"""Whose word the record's tier is (SPEC "Price tables", step 2): the answer's, or the request's
only where believing it cannot lower the price.

A request's `service_tier` / `speed` is a wish: an upstream that neither honours nor echoes it
(vLLM, llama.cpp, many OpenAI-compatible hosts) serves the call at its one price, so a tier the
answer does not confirm may not make the record cheaper — else any client halves its recorded
cost by writing "flex". OpenAI and Anthropic echo the tier they served, which is confirmation; an
upstream that honours a tier without echoing it is named in `[[upstream]] honoured_tiers`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from pricing import PriceBook, Resolution
from pricing.calculator import Priced, Tokens, price_parts, price_tokens
from proxy.protocol.names import BATCH, METERED
from proxy.protocol.usage import Usage

TIER_UNCONFIRMED = "tier_unconfirmed"  # the request's tier would have lowered the price; the answer did not confirm it


@dataclass(frozen=True, slots=True)
class TierChoice:
    """The tier the answer (or, without a hint, the model name) gives, and the request's tier
    when it differs and nobody confirmed it: kept only if it costs no less (`settle_tier`)."""

    model: str | None
    tier: str | None
    asked: str | None = None


def choose_tier(book: PriceBook, endpoint: str, response_model: str | None, requested_model: str | None,
                answer_hints: Iterable[str | None], request_hint: str | None, at: datetime,
                honoured: frozenset[str] = frozenset()) -> TierChoice:
    """The answer's hints (Anthropic speed, service_tier) decide when there is one; else the
    request's hint, believed as it is when the upstream honours that tier (`honoured`, lower-case),
    otherwise left in `asked` for `settle_tier`. Pure; raises on a pricing bug."""
    model = book.canonical_model(response_model, requested_model)
    if endpoint == BATCH:
        return TierChoice(model, BATCH)  # a batch result is billed at the batch tier by construction
    if endpoint not in METERED:
        return TierChoice(model, None)
    name = response_model or requested_model
    # Only a batch result is billed at the batch tier, whatever a synchronous call says.
    answer = [h for h in answer_hints if h and not _is_batch(h)]
    if answer:
        return TierChoice(model, book.resolve_tier(name, answer, model=model, at=at))
    base = book.resolve_tier(name, (), model=model, at=at)
    if not request_hint or _is_batch(request_hint):
        return TierChoice(model, base)
    asked = book.resolve_tier(name, (request_hint,), model=model, at=at)
    if asked == base or asked in honoured or request_hint.strip().lower() in honoured:
        return TierChoice(model, asked)
    return TierChoice(model, base, asked)


def settle_tier(book: PriceBook, choice: TierChoice, at: datetime, upstream: str | None, u: Usage,
                geo: str | None = None) -> tuple[str | None, bool]:
    """The tier to price at, and whether the request's tier was refused (flag tier_unconfirmed):
    an unconfirmed request tier stands only when it prices this usage at no less than the tier
    the answer gives (a dearer tier is the conservative reading). Raises what the calculator refuses."""
    if choice.asked is None or choice.model is None or choice.tier is None:
        return choice.tier, False
    base = _cost(book, choice.model, choice.tier, at, upstream, u, geo)
    if base is None:  # nothing to compare with: the request's tier is all there is
        return choice.asked, False
    asked = _cost(book, choice.model, choice.asked, at, upstream, u, geo)
    if asked is not None and asked >= base:
        return choice.asked, False
    return choice.tier, True


def priced_usage(book: PriceBook, model: str, tier: str, at: datetime, upstream: str | None, u: Usage,
                 geo: str | None = None) -> tuple[Priced, Resolution] | None:
    """The usage priced at the entry (model, tier) resolves to at `at`, with that resolution;
    None when no entry is in force. One band per request, or per compaction pass; fees inside."""
    found = book.resolve(model, tier, at, upstream=upstream or None, geo=geo)
    if found is None:
        return None
    if u.iterations:
        # The passes carry the tokens; the request's fee calls (reported once, at the top) are a
        # part of their own: fees are never banded.
        fees = Tokens(0, 0, 0, 0, 0, u.web_search_calls - sum(p.web_search_calls for p in u.iterations))
        return price_parts(found.price, (*(tokens(part) for part in u.iterations), fees)), found
    return price_tokens(found.price, tokens(u)), found


def tokens(u: Usage) -> Tokens:
    return Tokens(u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens,
                  u.cache_write_1h_tokens, u.web_search_calls)


def _cost(book: PriceBook, model: str, tier: str, at: datetime, upstream: str | None, u: Usage,
          geo: str | None) -> int | None:
    got = priced_usage(book, model, tier, at, upstream, u, geo)
    return None if got is None else got[0].cost.total


def _is_batch(hint: str) -> bool:
    return hint.strip().lower() == BATCH
