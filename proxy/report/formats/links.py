"""Where each figure of the decision, nodes, cost-curve and alternatives tables came from, as
links the Markdown and HTML reports write (issue 35: every number links to its origin).

A measured figure links to the report section it comes from, a price to the alternatives row
that prices it (with its date) and from there to the price table's own file, and an assumed
node figure to its source: the address, when the source is one; else, for a profile
llmmeter ships, the section of docs/report.md that lists them; else the row of the report's
node sources table that quotes the configured source.
"""

from __future__ import annotations

import re

from proxy.report.nodes import SHIPPED
from proxy.settings import NodeProfile

MEASURED_COST = "#by_model"  # the month's API cost and tokens, as billed
LOAD = "#load_by_minute"  # the measured load by the minute
CURVE = "#cost_curve"
ASSUMPTIONS = "#assumptions"  # [selfhost]: amortisation, electricity, operations
SHIPPED_PROFILES = "docs/report.md#shipped-node-profiles"
GENAI_PRICES = "https://github.com/pydantic/genai-prices/blob/main/prices/providers/{provider}.yml"

# An address a Markdown link can hold as it is (<...>) and a browser can open: no spaces, quotes or brackets.
_URL = re.compile(r"https?://[^\s<>\"'`]+")


def slug(name: str) -> str:
    """A configured name as part of an id: letters, digits, `.`, `_` and `-` kept, the rest `-`."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", name)


def node_anchor(node: str) -> str:
    return f"node-{slug(node)}"


def source_anchor(node: str, figure: str) -> str:
    return f"source-{slug(node)}-{figure}"


def provider_anchor(provider: str) -> str:
    return f"provider-{slug(provider)}"


def url_of(source: str) -> str | None:
    """The source itself when it is an address, else None."""
    return source if _URL.fullmatch(source) else None


def source_href(p: NodeProfile, figure: str) -> str:
    found = url_of(p.source(figure))
    if found is not None:
        return found
    return SHIPPED_PROFILES if p in SHIPPED else "#" + source_anchor(p.name, figure)


def price_href(provider: str) -> str:
    """genai-prices' own price file of a provider: its entries and the dates they start."""
    return GENAI_PRICES.format(provider=slug(provider))
