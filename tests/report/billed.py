"""A small ledger with version 3's billing in it, written through the real store: 1-hour cache
writes, web search fees, a long-context band, a provider's own cost, streamed requests with a
time to first token; priced by the real calculator with price entries written out here."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

from pricing import Band, Price, PriceBook, Tokens, price_tokens
from proxy.ledger.record import Record
from proxy.ledger.store import open_store
from proxy.report import Report, ReportInput, build_report
from proxy.settings import SelfHost

T0 = datetime(2026, 1, 1, tzinfo=UTC)
START = datetime(2026, 11, 10, 14, 0, tzinfo=UTC)
USD = 10**10
D = Decimal


def _price(model: str, tier: str, i: str, o: str, r: str, w: str, w1h: str | None = None, fee: str | None = None,
           bands: tuple[Band, ...] = ()) -> Price:
    return Price(model=model, tier=tier, effective_from=T0, input=D(i), output=D(o), cache_read=D(r),
                 cache_write=D(w), source="test", cache_write_1h=None if w1h is None else D(w1h),
                 web_search_per_1k=None if fee is None else D(fee), bands=bands)


SONNET = _price("claude-sonnet-4.5", "standard", "3", "15", "0.30", "3.75", "6", "10",
                (Band(200_000, input=D("6"), output=D("22.50"), cache_read=D("0.60"), cache_write=D("7.50"),
                      cache_write_1h=D("12")),))
SONNET_BATCH = _price("claude-sonnet-4.5", "batch", "1.50", "7.50", "0.15", "1.875", "3", "10",
                      (Band(200_000, input=D("3"), output=D("11.25")),))
KIMI = _price("kimi-k3.1-pro", "standard", "2", "8", "0.5", "2")
KIMI_FLEX = _price("kimi-k3.1-pro", "flex", "1", "4", "0.25", "1")
BOOK = PriceBook([SONNET, SONNET_BATCH, KIMI, KIMI_FLEX])

# id: (price, tokens, stream, ttft_ms, duration_ms, provider cost units)
REQUESTS: dict[str, tuple[Price, Tokens, bool, int | None, int, int | None]] = {
    # 16,000 input-side tokens: base prices. 500 output tokens in 2 s after the first: 250 tokens/s.
    "sonnet-small": (SONNET, Tokens(input=1000, cache_read=9000, cache_write=2000, output=500, cache_write_1h=4000,
                                    web_search_calls=3), True, 400, 2400, None),
    # 250,000 input-side tokens: above the 200,000 band. 1,000 output tokens in 2 s: 500 tokens/s.
    "sonnet-long": (SONNET, Tokens(input=250_000, cache_read=0, cache_write=0, output=1000), True, 1000, 3000, None),
    # Not streamed; the upstream said it cost $0.0135.
    "kimi-plain": (KIMI, Tokens(input=6000, cache_read=4000, cache_write=0, output=300), False, None, 900,
                   135_000_000),
    # 800 output tokens in 1.6 s: 500 tokens/s.
    "kimi-stream": (KIMI, Tokens(input=2000, cache_read=0, cache_write=0, output=800), True, 200, 1800, None),
}


def records() -> list[Record]:
    out = []
    for i, (rid, (price, t, stream, ttft, duration, provider)) in enumerate(REQUESTS.items()):
        priced = price_tokens(price, t)
        out.append(Record(
            id=rid, start=START + timedelta(minutes=i), tenant="default", endpoint="messages", stream=stream,
            code=200, outcome="ok", upstream="api", model_requested=price.model, response_model=price.model,
            model=price.model, tier=price.tier, input_tokens=t.input, cache_read_tokens=t.cache_read,
            cache_write_tokens=t.cache_write, output_tokens=t.output, reasoning_tokens=None,
            price_model=price.model, price_tier=price.tier, price_effective_from=price.effective_from,
            cost_units=priced.cost.total, duration_ms=duration, ttft_ms=ttft, workload="medium",
            cache_write_1h_tokens=t.cache_write_1h, web_search_calls=t.web_search_calls, price_band=priced.band,
            fee_units=priced.cost.fees, provider_cost_units=provider))
    return out


def billed_report(tmp: Path, url: str | None = None) -> Report:
    """The ledger's report; SQLite in `tmp` unless another ledger's `url` is given."""
    url = url or f"sqlite:///{tmp / 'ledger.db'}"
    store = open_store(url)
    store.migrate()
    writer = store.writer()
    writer.insert_many(records())
    writer.close()
    return build_report(open_store(url, read_only=True), ReportInput(
        month="2026-11", tz=ZoneInfo("UTC"), book=BOOK, selfhost=SelfHost(), workload_bounds=(4096, 32768, 131072),
        now=datetime(2026, 12, 2, tzinfo=UTC)))
