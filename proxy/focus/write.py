"""FOCUS rows as CSV: the columns of proxy.focus.columns, in that order, safe to open in a spreadsheet."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal
from typing import TextIO

import orjson

from pricing import PriceBook, format_usd
from proxy.export import csv_writer, spreadsheet_text
from proxy.focus.columns import NAMES, NOT_TEXT
from proxy.focus.rows import FocusRow, day_end, focus_rows
from proxy.ledger.record import Record
from proxy.times import rfc3339

_TOKENS_PER_PRICE = 1_000_000  # price tables are in USD per million tokens
_CALLS_PER_PRICE = 1_000  # and per 1,000 web searches
_DESCRIBED = {"input": "input tokens", "cache_read": "cache read tokens", "cache_write": "cache write tokens",
              "cache_write_1h": "1-hour cache write tokens", "output": "output tokens",
              "web_search": "web search calls", "tokens": "tokens"}


def write_focus(records: Iterable[Record], book: PriceBook, start: datetime, end: datetime, out: TextIO) -> int:
    """Every FOCUS row of the records in [start, end); returns how many rows were written."""
    writer = csv_writer(out)
    writer.writerow(NAMES)
    text = [name not in NOT_TEXT for name in NAMES]
    n = 0
    for row in focus_rows(records, book):
        values = focus_values(row, start, end)
        writer.writerow([_cell(values[name], t) for name, t in zip(NAMES, text, strict=True)])
        n += 1
    return n


def focus_values(row: FocusRow, start: datetime, end: datetime) -> dict[str, str | None]:
    """One row's cells by column name; None where FOCUS allows a null."""
    k = row.key
    fee = k.category == "web_search"
    per = _CALLS_PER_PRICE if fee else _TOKENS_PER_PRICE
    unit_price = row.list_unit_price
    cost = format_usd(row.cost_units)
    month = datetime(k.day.year, k.day.month, 1, tzinfo=UTC)
    following = datetime(month.year + month.month // 12, month.month % 12 + 1, 1, tzinfo=UTC)
    if k.category == "tokens":  # no published price to quote: priced per token, as the ledger holds it
        pricing_unit, quantity = "Tokens", Decimal(row.quantity)
    else:
        pricing_unit = f"{per} {'Requests' if fee else 'Tokens'}"
        quantity = Decimal(row.quantity).scaleb(-3 if fee else -6)  # exact: a shift of the exponent
    sku = "/".join(x for x in (k.upstream, k.model, k.tier or "", k.category))
    sku_price = None
    if k.price is not None and not k.unpriced:
        sku_price = "/".join((sku, f"band{k.band or 0}"))
    tags: dict[str, str] = {"tenant": k.tenant}
    if k.tag:
        tags["tag"] = k.tag
    what = _DESCRIBED[k.category]
    description = f"{k.model or 'unknown model'} ({k.tier or 'no tier'}) {what} via {k.upstream}"
    if k.unpriced:
        description += ", unpriced: no cost recorded"
    return {
        "BilledCost": cost, "BillingAccountId": k.upstream, "BillingAccountName": k.upstream,
        "BillingCurrency": "USD", "BillingPeriodEnd": rfc3339(following), "BillingPeriodStart": rfc3339(month),
        "ChargeCategory": "Usage", "ChargeClass": None, "ChargeDescription": description,
        "ChargePeriodEnd": rfc3339(min(day_end(k.day), end.astimezone(UTC))),
        "ChargePeriodStart": rfc3339(max(k.day, start.astimezone(UTC))),
        "ContractedCost": cost, "EffectiveCost": cost, "InvoiceIssuerName": k.upstream, "ListCost": cost,
        "PricingQuantity": _decimal(quantity), "PricingUnit": pricing_unit,
        "ProviderName": k.upstream, "PublisherName": k.upstream,
        "ServiceCategory": "AI and Machine Learning", "ServiceName": k.model or "unknown model",
        "ChargeFrequency": "Usage-Based", "ConsumedQuantity": str(row.quantity),
        "ConsumedUnit": "Requests" if fee else "Tokens",
        "ListUnitPrice": None if unit_price is None else _decimal(unit_price),
        "PricingCategory": "Other" if unit_price is None else "Standard",
        "ServiceSubcategory": "Generative AI", "SkuId": sku, "SkuPriceId": sku_price,
        "SubAccountId": k.tenant, "SubAccountName": k.tenant,
        "Tags": orjson.dumps(tags, option=orjson.OPT_SORT_KEYS).decode(),
        "x_Model": k.model, "x_Tier": k.tier, "x_TokenCategory": k.category,
        "x_PriceEffectiveFrom": None if k.price_effective_from is None else rfc3339(k.price_effective_from),
        "x_PriceBand": None if k.band is None else str(k.band),
        "x_Unpriced": "true" if k.unpriced else "false",
    }


def _decimal(d: Decimal) -> str:
    """Plain notation, no exponent and no trailing zeros (FOCUS 1.2 "Numeric Format")."""
    text = format(d, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text or "0"


def _cell(value: str | None, text: bool) -> str:
    if value is None:
        return ""
    return spreadsheet_text(value) if text else value
