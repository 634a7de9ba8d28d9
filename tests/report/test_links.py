"""Every figure of the decision, nodes, cost-curve and alternatives tables links to where it came
from (issue 35, item 6), in Markdown and HTML: each link inside the report reaches an anchor of
the same report, and each link out of it is a configured source that is an address, the shipped
profiles' section of docs/report.md, or the provider's prices in genai-prices."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from pricing import PriceBook
from proxy.ledger.store import open_store
from proxy.report import ReportInput, build_report, render
from proxy.report.formats.links import GENAI_PRICES, SHIPPED_PROFILES
from proxy.report.model import Report
from proxy.report.nodes import SHIPPED
from proxy.settings import NodeProfile, SelfHost
from tests.report.dom import Page
from tests.report.test_load_by_minute import TZ, seeded

ROOT = Path(__file__).resolve().parents[2]
VENDOR = "https://example.com/vendor/mi355x-benchmark"
# A configured profile: one figure's source an address, the others words (an in-report source row).
OWN = NodeProfile("own.node_1", "8x test", kv_cache_tokens=400_000, prefill_tokens_per_s=20_000,
                  decode_tokens_per_s=2_000, rent_usd_per_month=Decimal("9000"), power_kw=Decimal("12"),
                  sources=(("accelerators", "our rack"), ("kv_cache_tokens", "measured on our node, 2026-10"),
                           ("prefill_tokens_per_s", "assumption"), ("decode_tokens_per_s", VENDOR),
                           ("rent_usd_per_month", "the lease"), ("power_kw", "the lease")))


def report(tmp_path: Path, nodes: tuple[NodeProfile, ...]) -> Report:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    seeded(url)
    inp = ReportInput(month="2026-11", tz=TZ, book=PriceBook([]), selfhost=SelfHost(node_profiles=nodes),
                      workload_bounds=(4096, 32768, 131072), now=datetime(2026, 12, 15, tzinfo=UTC))
    return build_report(open_store(url, read_only=True), inp)


def md_links(md: str) -> tuple[list[str], set[str]]:
    return re.findall(r"\]\(<([^>]*)>\)", md), set(re.findall(r'<a id="([^"]+)"></a>', md))


def check(links: Iterable[str], ids: set[str], allowed_out: set[str]) -> None:
    links = list(links)
    inside = [x[1:] for x in links if x.startswith("#")]
    assert inside and sorted(set(inside) - ids) == []  # every link inside the report has its anchor
    out = {x for x in links if not x.startswith("#")}
    assert out <= allowed_out, out - allowed_out


def allowed(r: Report) -> set[str]:
    sources = {s for x in r.nodes for _, s in x.profile.sources if s.startswith("https://")}
    providers = {GENAI_PRICES.format(provider=a.provider) for m in r.alternatives for a in m.rows}
    return sources | providers | {SHIPPED_PROFILES}


def test_every_figure_links_to_its_origin(tmp_path: Path) -> None:
    r = report(tmp_path, (OWN, *SHIPPED))
    md = render(r, "md")
    links, ids = md_links(md)
    check(links, ids, allowed(r))
    page = Page(render(r, "html"))
    check(page.links, page.ids, allowed(r))
    assert set(page.links) == set(links)  # the same origins in both formats

    # The decision: each cost, nodes count and binding limit links to its origin.
    decision = md[md.index("## The decision"):md.index("## Totals")]
    rows = [line for line in decision.splitlines() if line.startswith(("| self_host:", "| → api", "| api"))]
    assert len(rows) == 1 + 1 + len(SHIPPED)
    assert "| [$0.00021](<#by_model>) |" in rows[0]  # the API's cost: the month's bill, measured
    own = next(x for x in rows if "self_host:own.node_1" in x)
    assert own.count("(<#node-own.node_1>)") == 3 and "(<#cost_curve>)" in own and "(<#assumptions>)" in own

    # Node figures: an address is linked as it is; words are quoted in the sources table, which the
    # figure links to; the shipped profiles' figures link to the docs section that lists them.
    nodes = md[md.index("## Nodes the load needs"):md.index("## Node figures and their sources")]
    own_row = next(line for line in nodes.splitlines() if 'id="node-own.node_1"' in line)
    assert f"[2,000](<{VENDOR}>)" in own_row
    assert "[400,000](<#source-own.node_1-kv_cache_tokens>)" in own_row
    assert "[$9,000.00/month](<#source-own.node_1-rent_usd_per_month>)" in own_row
    sources = md[md.index("## Node figures and their sources"):]
    quoted = '<a id="source-own.node_1-kv_cache_tokens"></a>own.node_1 | KV cache | measured on our node, 2026-10 |'
    assert quoted in sources
    assert f"| [{VENDOR}](<{VENDOR}>) |" in sources
    shipped_row = next(line for line in nodes.splitlines() if 'id="node-8xB300-vllm-dcp8"' in line)
    assert f"[18,500,000](<{SHIPPED_PROFILES}>)" in shipped_row
    for key in ("load_by_minute", "nodes", "node_sources", "cost_curve", "decision", "by_model", "assumptions"):
        assert key in ids and key in page.ids, key


def test_shipped_profiles_section_exists_in_the_docs() -> None:
    """docs/report.md has the heading MkDocs gives the anchor the shipped profiles' figures link to."""
    page, anchor = SHIPPED_PROFILES.split("#")
    headings = re.findall(r"^#+ (.+)$", (ROOT / page).read_text(), re.M)
    assert anchor in {re.sub(r"[^a-z0-9]+", "-", h.lower()).strip("-") for h in headings}


def test_providers_link_to_their_prices_with_the_date(tmp_path: Path) -> None:
    """The decision's provider option links to its row of the alternatives table, which links its cost
    and price date to genai-prices' price file for that provider."""
    r = report(tmp_path, SHIPPED)
    if not any(a.cost_usd is not None for m in r.alternatives for a in m.rows):
        return  # genai-prices is not installed: no provider option (tests/report/test_alternatives.py)
    md = render(r, "md")
    links, ids = md_links(md)
    check(links, ids, allowed(r))
    choice = next(o.choice for o in r.decision if o.choice.startswith("provider:"))
    provider = choice.split(":", 1)[1]
    assert f"(<#provider-{provider}>)" in md and f'<a id="provider-{provider}"></a>{provider}' in md
    row = next(line for line in md.splitlines() if f'<a id="provider-{provider}"></a>' in line)
    assert row.count(f"(<{GENAI_PRICES.format(provider=provider)}>)") == 2
    assert re.search(r"genai-prices [0-9.]+, (from \d{4}-\d{2}-\d{2}|undated)\]", row)
