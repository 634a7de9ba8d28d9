"""The report as one self-contained web page: inline CSS and SVG, nothing fetched to open it."""

from __future__ import annotations

from proxy.report.decision import answer
from proxy.report.formats.alternatives import alternatives_table
from proxy.report.formats.charts import Chart, all_charts
from proxy.report.formats.curve import curve_svg, curve_table
from proxy.report.formats.decision import decision_table, far_from_close
from proxy.report.formats.load_tables import load_table, nodes_table, slo_table, sources_table
from proxy.report.formats.svg import esc, legend
from proxy.report.formats.tables import Cell, Table, Value, report_tables
from proxy.report.model import Report
from proxy.report.numbers import UNPRICED, compact, count, counted, money, percent
from proxy.times import rfc3339

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1d2433; background: #fff; }
main { max-width: 1120px; margin: 0 auto; padding: 24px 20px 48px; }
h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 36px 0 8px; border-bottom: 1px solid #dde3ea;
  padding-bottom: 4px; } h3 { font-size: 15px; margin: 22px 0 6px; }
.meta { color: #5b6472; margin: 0 0 16px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(150px, 1fr)); gap: 10px; margin: 16px 0; }
.card { border: 1px solid #dde3ea; border-radius: 6px; padding: 10px 12px; background: #f7f9fc; }
.card .k { font-size: 12px; color: #5b6472; } .card .v { font-size: 22px; font-weight: 600; overflow-wrap: anywhere; }
.card .s { font-size: 12px; color: #5b6472; }
.summary { background: #eef4fb; padding: 10px 14px; border-left: 4px solid #0072b2; }
.warn { background: #fff4e5; padding: 10px 14px; border-left: 4px solid #e69f00; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; margin: 4px 0 6px; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
th, td { padding: 4px 8px; border-bottom: 1px solid #e6eaef; vertical-align: bottom; white-space: nowrap; }
td.prose { white-space: normal; }
td a { color: inherit; text-decoration: underline dotted #8a94a3; text-underline-offset: 2px; }
td a:hover { color: #0072b2; text-decoration-style: solid; }
th { background: #f2f5f9; text-align: left; font-weight: 600; white-space: nowrap; }
th .unit { display: block; font-weight: 400; font-size: 11px; color: #5b6472; }
.n { text-align: right; white-space: nowrap; }
tbody tr:hover { background: #f7f9fc; }
tfoot td { font-weight: 600; border-top: 2px solid #9aa5b1; border-bottom: none; }
.note { color: #5b6472; font-size: 12.5px; margin: 4px 0 0; }
figure { margin: 8px 0 20px; } figcaption { font-weight: 600; margin-bottom: 4px; }
svg { display: block; max-width: 100%; height: auto; background: #fff; }
svg .grid { stroke: #e6eaef; } svg .axis, svg .tick-mark { stroke: #5b6472; }
svg .tick { font-size: 12px; fill: #3d4552; } svg .axis-title { font-size: 13px; fill: #1d2433; font-weight: 600; }
svg .bar:hover { opacity: .75; } svg .line { fill: none; stroke-width: 3; }
svg .line-label, svg .mark-label { font-size: 13px; font-weight: 600; paint-order: stroke; stroke: #fff;
  stroke-width: 4px; stroke-linejoin: round; }
svg .guide { stroke: #5b6472; stroke-dasharray: 3 3; } svg .mark { stroke: #fff; stroke-width: 2; }
svg .region-left { fill: #0072b2; opacity: .05; } svg .region-right { fill: #e69f00; opacity: .07; }
svg .region { font-size: 12px; fill: #5b6472; font-style: italic; }
.legend { list-style: none; display: flex; flex-wrap: wrap; gap: 4px 18px; padding: 0; margin: 0 0 6px;
  font-size: 12.5px; }
.legend .swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 6px;
  vertical-align: -1px; }
@media print { h2 { break-after: avoid; } figure, table { break-inside: avoid; } }
"""


def render_html(r: Report) -> str:
    tables = report_tables(r)
    charts = {c.key: c for c in all_charts(r)}
    scope = f", tenant {r.tenant}" if r.tenant else ""
    title = f"llmmeter usage report: {r.month} ({r.timezone}{scope})"
    body = [
        f"<h1>{esc(title)}</h1>",
        f'<p class="meta">Generated {esc(rfc3339(r.generated_at, "seconds"))}. Money in US dollars; '
        f"days and hours in {esc(r.timezone)}. Hover over a bar, line or point for its exact value.</p>",
        _cards(r),
    ]
    # The volume break-even's sentence is the first page's summary only without a decision;
    # beside one it is detail, and goes with the self-hosting section.
    volume = f'<p class="summary">{esc(r.self_hosting.summary)}</p>'
    if r.decision:  # the decision on the first screen, the detail below it
        far = far_from_close(r.decision)
        body += [f'<p class="summary" data-far="1">{esc(far)}</p>'] if far else []
        body.append(_table(decision_table(r.decision)))
    else:
        body.append(volume)
    if r.unpriced_models:
        body.append(f'<p class="warn">Unpriced models (their cost is unknown and not in the totals): '
                    f"{esc(', '.join(r.unpriced_models))}.</p>")
    body += ["<h2>Cost</h2>", _figure(charts["daily-cost"]), _table(tables["by_model"]),
             _table_or_note(tables["unpriced_estimated"]),
             "<h2>Tokens</h2>", _figure(charts["token-mix"]), _table(tables["totals"]), _figure(charts["cache-by-day"]),
             "<h2>Who and what</h2>", _table(tables["by_tenant"]), _table(tables["by_tag"]),
             _figure(charts["tag-workload"]), _table(tables["by_workload"]), _table(tables["by_tag_workload"]),
             _table(tables["by_band"]),
             "<h2>When</h2>", _figure(charts["hourly"]), _forecast(r), _table(tables["daily"]),
             "<h2>Speed</h2>", _table(tables["speed"]),
             *(("<h2>Budgets</h2>", _table(tables["budgets"])) if r.budgets else ()),
             "<h2>What if</h2>", _table(tables["what_if"]),
             "<h2>Self-hosting</h2>", *((volume,) if r.decision else ()), _figure(charts["breakeven"]),
             _table(tables["self_hosting"]),
             _table(tables["assumptions"]), _table(load_table(r.load_by_minute)), _table_or_note(nodes_table(r.nodes)),
             _table_or_note(sources_table(r.nodes)), _table_or_note(slo_table(r.slo))]
    body += [_curve(r), _table_or_note(curve_table(r.cost_curve)),
             _table_or_note(alternatives_table(r.alternatives, r.alternatives_priced))]
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc(title)}</title>'
            f"<style>{_CSS}</style></head>\n<body><main>\n" + "\n".join(body) + "\n</main></body></html>\n")


def _curve(r: Report) -> str:
    """The cost curve's chart, or one sentence on why there is none."""
    svg, names, note = curve_svg(r.cost_curve)
    if not svg:
        return f'<p class="note">{esc(note)}</p>'
    return _figure(Chart("cost-curve", "Cost per million tokens by utilisation", svg, names, note))


def _cards(r: Report) -> str:
    t, f, sh = r.totals.usage, r.forecast, r.self_hosting
    cards = [("Cost this month", _lower_bound(t.cost_units, t.unpriced_requests),
              counted(t.unpriced_requests, "unpriced request") + (", left out" if t.unpriced_requests else "")),
             *((("Provider-reported cost", money(t.provider_cost_units),
                 f"over {counted(t.provider_costed, 'request')} that reported one"),) if t.provider_costed else ()),
             *((("Fees", money(t.fee_units), f"{counted(t.web_search_calls, 'web search call')}, in the cost"),)
               if t.web_search_calls or t.fee_units else ()),
             ("Requests", count(t.requests), f"{percent(r.estimated_share)} with estimated usage"),
             ("Tokens", compact(t.billed_tokens), "input, cache and output"),
             ("Cache-hit rate", percent(r.cache_hit_rate), "of input-side tokens")]
    if not f.month_complete:
        cards.append(("Forecast for the month", money(f.projected_cost_units),
                      f"{compact(f.projected_tokens)} tokens at the run-rate so far"))
    best = answer(r.decision)
    if best is not None:  # the decision's answer; the volume break-even is detail beside it
        cards.append(("Cheapest this month", best.choice, f"{money(best.monthly_cost_units)} a month (the decision)"))
    elif sh.api_tokens:
        cards.append(("Self-hosting breaks even at", f"{sh.volume_multiple_to_breakeven:,.1f}x",
                      f"this month's volume ({compact(sh.breakeven_monthly_tokens)} tokens/month)"))
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="k">{esc(k)}</div><div class="v">{esc(v)}</div><div class="s">{esc(s)}'
        f"</div></div>" for k, v, s in cards) + "</div>"


def _lower_bound(units: int, unpriced: int) -> str:
    """The month's cost on a card: unknown when nothing was priced, a lower bound beside unpriced requests."""
    if not unpriced:
        return money(units)
    return f"≥ {money(units)}" if units else UNPRICED


def _forecast(r: Report) -> str:
    f = r.forecast
    if f.month_complete:
        return ""
    return (f'<p class="note">Forecast: {esc(money(f.projected_cost_units))} and {esc(count(f.projected_tokens))} '
            f"tokens by month end ({esc(f.method)}).</p>")


def _figure(c: Chart) -> str:
    note = f'<p class="note">{esc(c.note)}</p>' if c.note else ""
    return f"<figure><figcaption>{esc(c.title)}</figcaption>{legend(c.legend)}{c.svg}{note}</figure>"


def _table(t: Table) -> str:
    def head(i: int) -> str:
        c = t.columns[i]
        unit = f'<span class="unit">{esc(c.unit)}</span>' if c.unit else ""
        return f'<th scope="col"{_align(i, t)}>{esc(c.title)}{unit}</th>'

    def row(values: tuple[Value, ...]) -> str:
        return "<tr>" + "".join(_cell(v, _align(i, t)) for i, v in enumerate(values)) + "</tr>"

    foot = f"<tfoot>{row(t.total)}</tfoot>" if t.total else ""
    body = "".join(row(v) for v in t.rows) or f'<tr><td colspan="{len(t.columns)}">{esc(t.empty)}</td></tr>'
    note = f'<p class="note">{esc(t.note)}</p>' if t.note else ""
    return (f'<div class="scroll" id="{esc(t.key)}"><table data-section="{esc(t.key)}"><caption>{esc(t.title)}'
            f"</caption><thead><tr>{''.join(head(i) for i in range(len(t.columns)))}</tr></thead>"
            f"<tbody>{body}</tbody>{foot}</table></div>{note}")


def _cell(v: Value, align: str) -> str:
    """A cell; a figure with an origin as a link to it, and the id that links to its row."""
    if not isinstance(v, Cell):
        return f"<td{align}>{esc(v)}</td>"
    anchor = f' id="{esc(v.anchor)}"' if v.anchor else ""
    shown = esc(v.text) if v.href is None else f'<a href="{esc(v.href)}">{esc(v.text)}</a>'
    return f"<td{anchor}{align}>{shown}</td>"


def _table_or_note(t: Table) -> str:
    """A table with rows; else what its absence means, in one sentence."""
    return _table(t) if t.rows else f'<p class="note" id="{esc(t.key)}" data-section="{esc(t.key)}">{esc(t.empty)}</p>'


def _align(i: int, t: Table) -> str:
    c = t.columns[i]
    return ' class="n"' if c.numeric else ' class="prose"' if c.prose else ""
