"""The report as Markdown (for a terminal), JSON (SPEC's keys) or CSV (one long table)."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal
from typing import Any

TOKEN_COLS = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "reasoning_tokens")
CSV_SECTIONS = (("totals", None), ("by_model", "by_model"), ("by_tenant", "by_tenant"), ("by_tag", "by_tag"),
                ("by_workload", "by_workload"), ("by_tag_workload", "by_tag_workload"),
                ("daily", "daily"), ("hourly", "hourly_profile"))


def render(report: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(report, indent=2) + "\n"
    if fmt == "csv":
        return _csv(report)
    if fmt == "md":
        return markdown(report)
    if fmt == "html":
        from proxy.report.html import render_html

        return render_html(report)
    raise ValueError(f"report format {fmt!r} is not available (md, json, csv or html)")


def _csv(report: dict[str, Any]) -> str:
    tables = [("totals", [report["totals"]])] + [(name, report[key]) for name, key in CSV_SECTIONS[1:]]
    columns: list[str] = ["section"]
    for _, rows in tables:
        for row in rows:
            columns += [k for k in row if k not in columns]
    out = io.StringIO()
    w = csv.DictWriter(out, columns, lineterminator="\n")
    w.writeheader()
    for name, rows in tables:
        for row in rows:
            w.writerow({"section": name, **row})
    return out.getvalue()


def _money(s: str) -> str:
    return f"${Decimal(s).quantize(Decimal('0.01')):,}" if s else "-"


def _n(v: int) -> str:
    return f"{v:,}"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def markdown(r: dict[str, Any]) -> str:
    t = r["totals"]
    scope = f", tenant {r['tenant']}" if r["tenant"] else ""
    parts = [f"# llmmeter usage report: {r['month']} ({r['timezone']}{scope})", "",
             f"**{_money(t['cost_usd'])}** for {_n(t['requests'])} requests; cache-hit rate "
             f"{r['cache_hit_rate']:.1%}; {r['estimated_share']:.1%} of requests had estimated usage.", ""]
    if r["unpriced_models"]:
        parts += [f"Unpriced models (cost unknown): {', '.join(r['unpriced_models'])}.", ""]
    parts += ["## Totals", "", _table(["input", "cache read", "cache write", "output", "reasoning", "cost"],
                                      [[*(_n(t[c]) for c in TOKEN_COLS), _money(t["cost_usd"])]]), ""]

    def section(title: str, key: str, names: list[str]) -> None:
        hits = bool(r[key]) and "cache_hit_rate" in r[key][0]
        rows = [[str(x[n]) for n in names] + [_n(x["requests"]), *(_n(x[c]) for c in TOKEN_COLS[:4]),
                                               _money(x["cost_usd"]), f"{x['cost_share']:.1%}",
                                               *([f"{x['cache_hit_rate']:.1%}"] if hits else [])] for x in r[key]]
        parts.extend([f"## {title}", "", _table([*names, "requests", "input", "cache read", "cache write",
                                                 "output", "cost", "share", *(["cache hits"] if hits else [])],
                                                rows), ""])

    section("By model and tier", "by_model", ["model", "tier", "upstream"])
    section("By tenant", "by_tenant", ["tenant", "input_tokens_p50", "input_tokens_p95"])
    section("By tag", "by_tag", ["tag"])
    section("By workload", "by_workload", ["workload", "min_input_tokens"])
    section("By tag and workload", "by_tag_workload", ["tag", "workload"])
    parts += [r["workload_summary"], ""]
    parts += ["## Daily", "", _table(["date", "requests", "input", "cache read", "output", "cost"], [
        [d["date"], _n(d["requests"]), _n(d["input_tokens"]), _n(d["cache_read_tokens"]), _n(d["output_tokens"]),
         _money(d["cost_usd"])] for d in r["daily"]]), ""]
    peak = max(r["hourly_profile"], key=lambda h: h["tokens"])
    parts += [f"Busiest local hour: {peak['hour']:02d}:00 ({_n(peak['tokens'])} tokens). Peak-to-off-peak "
              f"ratio {r['peak_to_offpeak_ratio']:.2f} (mean tokens of the 4 busiest hours over the 12 quietest).", ""]
    f, w = r["forecast"], r["what_if"]
    if not f["month_complete"]:
        parts += [f"Forecast: {_money(f['projected_cost_usd'])} and {_n(f['projected_tokens'])} tokens by month "
                  f"end ({f['method']}).", ""]
    parts += ["## What if", "", _table(["as billed", "all standard", "all highspeed", "without cache"], [[
        _money(t["cost_usd"]), _money(w["all_standard_usd"]), _money(w["all_highspeed_usd"]),
        _money(w["without_cache_usd"])]]), ""]
    if "reprice" in r:
        parts += [f"At the prices in force at {r['reprice']['at']}: {_money(r['reprice']['cost_usd'])}.", ""]
    sh = r["self_hosting"]
    parts += ["## Self-hosting", "", sh["summary"], "",
              _table(["assumption", "value", "source"],
                     [[k, v["value"], v["source"]] for k, v in sh["assumptions"].items()]), ""]
    return "\n".join(parts)
