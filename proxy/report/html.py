"""The report as one self-contained HTML file: inline CSS and SVG, nothing fetched to open it."""

from __future__ import annotations

import html
from decimal import Decimal
from typing import Any

from proxy.report.render import TOKEN_COLS, markdown

PALETTE = ("#3b6fb6", "#e07b39", "#5a9e4b", "#b84a62", "#7d5ba6", "#8c8c8c", "#c9a227", "#2a9d8f")
W, H, PAD = 760, 240, 44


def render_html(r: dict[str, Any]) -> str:
    charts = [
        ("Daily cost by model and tier", _daily_cost(r)),
        ("Token mix", _token_mix(r)),
        ("Where the money goes: cost by tag and workload", _tag_workload(r)),
        ("Hourly profile (local time)", _hourly(r)),
        ("Cache-hit rate by day", _cache_by_day(r)),
        ("API vs self-hosting cost across monthly volume", _breakeven(r)),
    ]
    body = "".join(f"<section><h2>{html.escape(t)}</h2>{svg}</section>" for t, svg in charts)
    tables = "".join(f"<pre>{html.escape(block)}</pre>" for block in markdown(r).split("\n\n## ")[1:])
    title = f"llmmeter usage report {r['month']} ({r['timezone']})"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 24px auto; max-width: 820px; color: #222; }}
h1 {{ font-size: 22px; }} h2 {{ font-size: 16px; margin-top: 28px; }}
svg {{ background: #fafafa; border: 1px solid #ddd; }} .axis {{ font-size: 10px; fill: #555; }}
.legend {{ font-size: 11px; }} pre {{ font-size: 11px; overflow-x: auto; background: #f6f6f6; padding: 8px; }}
.summary {{ background: #eef4fb; padding: 10px 14px; border-left: 4px solid #3b6fb6; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p class="summary">Total <b>{_money(r["totals"]["cost_usd"])}</b> for {r["totals"]["requests"]:,} requests.
{html.escape(r["self_hosting"]["summary"])}</p>
{body}
<h2>Tables</h2>{tables}
<script>document.body.dataset.charts = String(document.querySelectorAll("svg[data-chart]").length);</script>
</body></html>
"""


def _money(s: str) -> str:
    return f"${Decimal(s).quantize(Decimal('0.01')):,}" if s else "-"


def _svg(name: str, inner: str, height: int = H) -> str:
    return (f'<svg data-chart="{name}" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" '
            f'viewBox="0 0 {W} {height}" role="img">{inner}</svg>')


def _bars(values: list[list[float]], labels: list[str], keys: list[str], name: str,
          marks: dict[int, str] | None = None) -> str:
    """Stacked bars, one per label; values[i][k] is bar i's part for keys[k]."""
    top = max((sum(v) for v in values), default=0) or 1
    n = max(len(values), 1)
    bw = (W - 2 * PAD) / n
    parts = []
    for i, stack in enumerate(values):
        y: float = H - PAD
        for k, v in enumerate(stack):
            h = (H - 2 * PAD) * v / top
            y -= h
            parts.append(f'<rect class="bar" x="{PAD + i * bw + 1:.1f}" y="{y:.1f}" width="{max(bw - 2, 1):.1f}" '
                         f'height="{h:.1f}" fill="{PALETTE[k % len(PALETTE)]}"><title>{html.escape(labels[i])} '
                         f'{html.escape(keys[k])}: {v:,.4g}</title></rect>')
        if marks and i in marks:
            parts.append(f'<text class="axis" x="{PAD + (i + 0.5) * bw:.1f}" y="{PAD - 6}" '
                         f'text-anchor="middle">{marks[i]}</text>')
    step = max(1, n // 12)
    parts += [f'<text class="axis" x="{PAD + (i + 0.5) * bw:.1f}" y="{H - PAD + 14}" text-anchor="middle">'
              f'{html.escape(labels[i])}</text>' for i in range(0, len(labels), step)]
    parts.append(f'<text class="axis" x="4" y="{PAD - 10}">max {top:,.4g}</text>')
    parts += [f'<rect x="{PAD + 180 * k}" y="{H - 16}" width="10" height="10" fill="{PALETTE[k % len(PALETTE)]}"/>'
              f'<text class="legend" x="{PAD + 180 * k + 14}" y="{H - 7}">{html.escape(key)}</text>'
              for k, key in enumerate(keys[:5])]
    return _svg(name, "".join(parts))


def _daily_cost(r: dict[str, Any]) -> str:
    keys = sorted({k for d in r["daily"] for k in d["cost_by_model_tier"]}) or ["cost"]
    values = [[float(Decimal(d["cost_by_model_tier"].get(k, "0"))) for k in keys] for d in r["daily"]]
    return _bars(values, [d["date"][8:] for d in r["daily"]], keys, "daily-cost")


def _tag_workload(r: dict[str, Any]) -> str:
    workloads = ["short", "medium", "long", "very_long"]
    tags = sorted({x["tag"] for x in r["by_tag_workload"]}) or ["untagged"]
    cell = {(x["tag"], x["workload"]): float(Decimal(x["cost_usd"])) for x in r["by_tag_workload"]}
    values = [[cell.get((t, w), 0.0) for w in workloads] for t in tags]
    return _bars(values, tags, workloads, "tag-workload") + f"<p>{html.escape(r['workload_summary'])}</p>"


def _token_mix(r: dict[str, Any]) -> str:
    t = r["totals"]
    keys = ["input", "cache read", "cache write", "output"]
    return _bars([[float(t[c]) for c in TOKEN_COLS[:4]]], ["month"], keys, "token-mix")


def _hourly(r: dict[str, Any]) -> str:
    hours = r["hourly_profile"]
    ranked = sorted(range(24), key=lambda h: hours[h]["tokens"], reverse=True)
    marks = {h: "peak" for h in ranked[:4]} | {h: "off" for h in ranked[12:]}
    return _bars([[float(h["tokens"])] for h in hours], [f"{h['hour']:02d}" for h in hours], ["tokens"],
                 "hourly", marks)


def _cache_by_day(r: dict[str, Any]) -> str:
    rates = []
    for d in r["daily"]:
        side = d["input_tokens"] + d["cache_read_tokens"] + d["cache_write_tokens"]
        rates.append([100.0 * d["cache_read_tokens"] / side if side else 0.0])
    return _bars(rates, [d["date"][8:] for d in r["daily"]], ["cache-hit %"], "cache-by-day")


def _breakeven(r: dict[str, Any]) -> str:
    sh = r["self_hosting"]
    tokens, api = sh["api_tokens"], float(Decimal(sh["api_cost_usd"]))
    monthly = float(Decimal(sh["monthly_cost_usd"]))
    reach = max(sh["breakeven_monthly_tokens"] * 1.5, tokens * 2, 1)
    per_token = api / tokens if tokens else 0.0
    top = max(monthly * 1.5, per_token * reach, 1)

    def x(v: float) -> float:
        return float(PAD + (W - 2 * PAD) * v / reach)

    def y(v: float) -> float:
        return float(H - PAD - (H - 2 * PAD) * v / top)

    parts = [f'<line x1="{x(0):.1f}" y1="{y(0):.1f}" x2="{x(reach):.1f}" y2="{y(per_token * reach):.1f}" '
             f'stroke="{PALETTE[0]}" stroke-width="2"><title>API cost</title></line>',
             f'<line x1="{x(0):.1f}" y1="{y(monthly):.1f}" x2="{x(reach):.1f}" y2="{y(monthly):.1f}" '
             f'stroke="{PALETTE[1]}" stroke-width="2"><title>self-hosting cost</title></line>',
             f'<circle cx="{x(tokens):.1f}" cy="{y(api):.1f}" r="5" fill="#222"/>',
             f'<text class="legend" x="{x(tokens) + 8:.1f}" y="{y(api) - 8:.1f}">you are here</text>',
             f'<text class="legend" x="{PAD}" y="{H - 7}">blue: API at this month\'s $/token; orange: '
             f'self-hosting ${monthly:,.0f}/month; x: tokens per month up to {reach:,.0f}</text>']
    return _svg("breakeven", "".join(parts))
