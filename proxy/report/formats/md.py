"""The report as Markdown, for a terminal or a wiki page."""

from __future__ import annotations

from proxy.mdtext import md_cell as _cell
from proxy.report.formats.alternatives import alternatives_table
from proxy.report.formats.curve import curve_table
from proxy.report.formats.decision import decision_table, far_from_close
from proxy.report.formats.load_tables import load_table, nodes_table, slo_table, sources_table
from proxy.report.formats.tables import Cell, Table, Value, peak_to_offpeak_words, report_tables
from proxy.report.model import Report
from proxy.report.numbers import cost, count, counted, money, percent


def render_md(r: Report) -> str:
    tables = report_tables(r)
    t = r.totals
    scope = f", tenant {r.tenant}" if r.tenant else ""
    parts = [f"# llmmeter usage report: {r.month} ({r.timezone}{scope})", "",
             f"**{cost(t.usage.cost_units, t.unpriced_requests)}** for {counted(t.usage.requests, 'request')}; "
             f"cache-hit rate "
             f"{percent(r.cache_hit_rate)}; {percent(r.estimated_share)} of requests had estimated usage.", ""]
    if r.decision:  # the decision first, the detail below it
        far = far_from_close(r.decision)
        parts += [f"**{far}**", ""] if far else []
        parts += _section(decision_table(r.decision))
    if t.usage.provider_costed:
        n = t.usage.provider_costed
        parts += [f"The upstreams' own figure: {money(t.usage.provider_cost_units)} over "
                  f"{counted(n, 'request')} that reported a cost.", ""]
    if r.pruned_months:
        lost = (" Input-side percentiles, speed, the SLO table and the unpriced and estimated detail cannot be "
                "given for their requests: they were pruned before llmmeter kept those apart."
                if r.pruned_before_histograms else "")
        parts += [f"Per-request rows of {', '.join(r.pruned_months)} (UTC) were pruned: the figures come from the "
                  f"hourly rollups and the histograms a prune keeps.{lost}", ""]
    if r.unpriced_models:
        parts += [f"Unpriced models (cost unknown): {', '.join(map(_cell, r.unpriced_models))}.", ""]
    for key in ("totals", "by_model", "by_tenant", "by_tag", "by_workload", "by_tag_workload"):
        parts += _section(tables[key])
    parts += [r.workload_summary, ""]
    parts += _section(tables["by_band"])
    parts += _section(tables["daily"])
    peak = max(r.hourly_profile, key=lambda h: h.tokens)
    words = peak_to_offpeak_words(r)
    parts += [f"Busiest local hour: {peak.hour:02d}:00 ({counted(peak.tokens, 'token')}). "
              f"{words[0].upper()}{words[1:]}.", ""]
    f = r.forecast
    if not f.month_complete:
        parts += [f"Forecast: {money(f.projected_cost_units)} and {count(f.projected_tokens)} tokens by month "
                  f"end ({f.method}).", ""]
    parts += _section(tables["speed"])
    parts += _section(tables["unpriced_estimated"])
    if r.budgets:
        parts += _section(tables["budgets"])
    parts += _section(tables["what_if"])
    parts += _section(load_table(r.load_by_minute)) + _section(nodes_table(r.nodes))
    parts += _section(sources_table(r.nodes)) + _section(slo_table(r.slo))
    parts += _section(curve_table(r.cost_curve))
    parts += _section(alternatives_table(r.alternatives, r.alternatives_priced))
    parts += ["## Self-hosting", "", r.self_hosting.summary, "", _table(tables["self_hosting"]), "",
              '<a id="assumptions"></a>', "", _table(tables["assumptions"]), ""]
    return "\n".join(parts)


def _section(table: Table) -> list[str]:
    """The section under its heading, with the anchor that links to it (`#key`, as in the HTML report)."""
    lines = [f'<a id="{table.key}"></a>', "", f"## {table.title}", "", _table(table) if table.rows else table.empty,
             ""]
    return lines + ([table.note, ""] if table.note else [])


def _table(table: Table) -> str:
    headers = [f"{c.title} ({c.unit})" if c.unit and c.unit != "count" else c.title for c in table.columns]
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "".join("---:|" if c.numeric else "---|" for c in table.columns)]
    lines += ["| " + " | ".join(_value(v) for v in row) + " |" for row in table.rows]
    if table.total:
        lines.append("| " + " | ".join(f"**{_value(v)}**" if v else "" for v in table.total) + " |")
    return "\n".join(lines)


def _value(v: Value) -> str:
    """A cell; a figure with an origin as a link to it, a row's anchor as an empty HTML anchor before it."""
    if not isinstance(v, Cell):
        return _cell(v)
    shown = _cell(v.text)  # escapes [ and ]: the link text stays text
    if v.href is not None:
        shown = f"[{shown}](<{v.href}>)"
    return (f'<a id="{v.anchor}"></a>' if v.anchor else "") + shown
