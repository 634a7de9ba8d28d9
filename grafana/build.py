"""Writes the three llmmeter dashboards in grafana/dashboards/ as Grafana dashboard JSON.

The JSON files are what Grafana provisions; this script is where they are edited, so every
panel gets the same data source, units and layout rules. Run it after a change:

    python grafana/build.py          # rewrite grafana/dashboards/*.json
    python grafana/build.py --check  # exit 1 if the files differ from what it would write

PromQL reads the recording rules in prometheus/rules/ where one fits. Metric names are
SPEC.md's; labels are only those the proxy exports. Spend is llmmeter_cost_usd_total summed
over `type`: the billing categories and the fees (docs/metrics.md), so every money panel
includes fees. Every increase() also counts the first step of a series born inside its
window (see `counted`).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "dashboards"
SCHEMA_VERSION = 42  # Grafana 13's dashboard schema
DS = {"type": "prometheus", "uid": "${datasource}"}
TAGS = ["llmmeter"]

USD, TOKENS, TOKENS_S, SECONDS = "currencyUSD", "count:tokens", "count:tokens/s", "s"
RATIO, REQ_S, TIMES = "percentunit", "reqps", "suffix:×"

# Label filters from the template variables.
TM = 'tenant=~"$tenant", model=~"$model"'
M = 'model=~"$model"'
U = 'upstream=~"$upstream"'
B = 'budget=~"$budget"'
INPUT_SIDE = 'type=~"input|cache_read|cache_write|cache_write_1h"'
CACHE_TYPES = 'type=~"cache_read|cache_write|cache_write_1h"'
CACHE_WRITES = 'type=~"cache_write|cache_write_1h"'
METERED = 'endpoint!~"models|other", outcome!="rejected"'
# The 24 UTC hours at 0, so that an hour without traffic (or without llmmeter running) counts
# as an hour of no tokens, as in the report's hourly profile.
NO_HOURS = "(" + " or ".join(f'label_replace(vector(0), "hour", "{h:02d}", "", "")' for h in range(24)) + ")"
HOURLY_PROFILE = (f"(sum by (hour) (avg_over_time(llmmeter:tokens_per_second_by_utc_hour:rate1m{{{TM}}}[$__range]))"
                  f" or {NO_HOURS})")
# Proportional to the range's tokens in each UTC hour of the day (the rule is evaluated at a fixed
# interval), so ratios of it are ratios of the report's hourly totals.
HOURLY_TOTALS = (f"(sum by (hour) (sum_over_time(llmmeter:tokens_per_second_by_utc_hour:rate1m{{{TM}}}[$__range]))"
                 f" or {NO_HOURS})")
MONTH_HOURS = 730  # SPEC's self-hosting month: 730 h


Json = dict[str, Any]


# A counter series appears with its first increment, so increase() over a window in which it
# was born misses that step (the value of its first sample). The series llmmeter can name in
# advance start at 0 (docs/metrics.md); for the others, the first sample of a series absent at
# the window's start is added back.
_INCREASE = re.compile(r"increase\((\w+(?:\{[^{}]*\})?)\[([^\]]+)\]\)")


def counted(expr: str) -> str:
    """Each increase(s[w]) of `expr`, plus min_over_time(s[w]) for series not there w ago."""

    def one(m: re.Match[str]) -> str:
        s, w = m[1], m[2]
        return f"(increase({s}[{w}]) + (min_over_time({s}[{w}]) unless {s} offset {w}) or increase({s}[{w}]))"

    return _INCREASE.sub(one, expr)


def q(expr: str, legend: str = "__auto", instant: bool = False, fmt: str = "time_series") -> Json:
    return {"expr": counted(expr), "legendFormat": legend, "instant": instant, "range": not instant, "format": fmt}


def thresholds(*steps: tuple[float | None, str]) -> Json:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}


GREEN = thresholds((None, "green"))
BLUE = thresholds((None, "blue"))


class Board:
    """One dashboard: panels flow left to right in rows 24 units wide."""

    def __init__(self, uid: str, title: str, description: str, extra_vars: Iterable[Json] = ()) -> None:
        self.uid, self.title, self.description = uid, title, description
        self.extra_vars = list(extra_vars)
        self.panels: list[Json] = []
        self.x = self.y = self.row_h = 0

    def _place(self, w: int, h: int) -> Json:
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_h = max(self.row_h, h)
        return pos

    def row(self, title: str) -> None:
        self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        self.panels.append({"id": len(self.panels) + 1, "type": "row", "title": title, "collapsed": False,
                            "panels": [], "gridPos": self._place(24, 1)})
        self.x, self.y, self.row_h = 0, self.y + 1, 0

    def panel(self, kind: str, title: str, description: str, targets: list[Json], unit: str, w: int, h: int,
              options: Json, custom: Json | None = None, steps: Json = GREEN, color: str = "palette-classic",
              extra: Json | None = None, **defaults: Any) -> None:
        refs = "ABCDEFGHIJ"
        field_defaults: Json = {"unit": unit, "color": {"mode": color}, "thresholds": steps, **defaults}
        if custom is not None:
            field_defaults["custom"] = custom
        self.panels.append({
            "id": len(self.panels) + 1, "type": kind, "title": title, "description": description,
            "datasource": DS, "gridPos": self._place(w, h),
            "fieldConfig": {"defaults": field_defaults, "overrides": []},
            "options": options,
            "targets": [{"datasource": DS, "refId": refs[i], "editorMode": "code", **t} for i, t in enumerate(targets)],
            **(extra or {}),
        })

    # -- panel kinds --------------------------------------------------------------------
    def timeseries(self, title: str, description: str, targets: list[Json], unit: str, w: int = 12, h: int = 8,
                   stack: bool = False, bars: bool = False, max_: float | None = None, limit_line: float | None = None,
                   interval: str | None = None, min_: float | None = 0) -> None:
        custom: Json = {
            "drawStyle": "bars" if bars else "line", "lineWidth": 1, "fillOpacity": 80 if bars else 12,
            "gradientMode": "none", "lineInterpolation": "linear", "showPoints": "never", "pointSize": 4,
            "spanNulls": False, "axisPlacement": "auto", "axisBorderShow": False, "axisCenteredZero": False,
            "axisColorMode": "text", "axisLabel": "", "barAlignment": 0, "scaleDistribution": {"type": "linear"},
            "stacking": {"mode": "normal" if stack else "none", "group": "A"},
            "hideFrom": {"legend": False, "tooltip": False, "viz": False},
            "thresholdsStyle": {"mode": "dashed" if limit_line is not None else "off"},
        }
        steps = thresholds((None, "green"), (limit_line, "red")) if limit_line is not None else GREEN
        options = {"legend": {"calcs": ["mean", "max"], "displayMode": "table", "placement": "bottom",
                              "showLegend": True},
                   "tooltip": {"mode": "multi", "sort": "desc"}}
        extra = {"interval": interval} if interval else None
        bounds: Json = {} if min_ is None else {"min": min_}
        if max_ is not None:
            bounds["max"] = max_
        self.panel("timeseries", title, description, targets, unit, w, h, options, custom, steps,
                   extra=extra, **bounds)

    def stat(self, title: str, description: str, targets: list[Json], unit: str, w: int = 4, h: int = 4,
             steps: Json = BLUE, decimals: int | None = None, extra: Json | None = None) -> None:
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                   "orientation": "auto", "textMode": "auto", "colorMode": "value", "graphMode": "none",
                   "justifyMode": "auto", "showPercentChange": False, "percentChangeColorMode": "standard",
                   "wideLayout": True}
        more: Json = {} if decimals is None else {"decimals": decimals}
        self.panel("stat", title, description, targets, unit, w, h, options, steps=steps, color="thresholds",
                   extra=extra, **more)

    def bargauge(self, title: str, description: str, targets: list[Json], unit: str, w: int = 12, h: int = 8,
                 steps: Json = GREEN, max_: float | None = None, decimals: int | None = None) -> None:
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                   "orientation": "horizontal", "displayMode": "gradient", "valueMode": "color",
                   "namePlacement": "auto", "showUnfilled": True, "sizing": "auto", "minVizWidth": 8,
                   "minVizHeight": 16, "maxVizHeight": 300,
                   "legend": {"calcs": [], "displayMode": "list", "placement": "bottom", "showLegend": False}}
        more: Json = {"min": 0} if max_ is None else {"min": 0, "max": max_}
        if decimals is not None:
            more["decimals"] = decimals
        color = "thresholds" if steps is not GREEN else "continuous-GrYlRd"
        self.panel("bargauge", title, description, targets, unit, w, h, options, steps=steps, color=color, **more)

    def piechart(self, title: str, description: str, targets: list[Json], unit: str, w: int = 6, h: int = 8) -> None:
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                   "orientation": "auto", "pieType": "donut", "sort": "desc", "displayLabels": ["percent"],
                   "legend": {"calcs": [], "displayMode": "table", "placement": "right", "showLegend": True,
                              "values": ["value", "percent"]},
                   "tooltip": {"mode": "single", "sort": "none"}}
        custom = {"hideFrom": {"legend": False, "tooltip": False, "viz": False}}
        self.panel("piechart", title, description, targets, unit, w, h, options, custom)

    def table(self, title: str, description: str, targets: list[Json], unit: str, transformations: list[Json],
              w: int = 12, h: int = 8) -> None:
        options = {"showHeader": True, "frameIndex": 0, "cellHeight": "sm",
                   "sortBy": [{"displayName": "model", "desc": False}]}
        custom = {"align": "auto", "cellOptions": {"type": "auto"}, "inspect": False, "filterable": False}
        self.panel("table", title, description, targets, unit, w, h, options, custom,
                   extra={"transformations": transformations})

    def barchart(self, title: str, description: str, targets: list[Json], unit: str, x_field: str,
                 transformations: list[Json], w: int = 12, h: int = 8) -> None:
        options = {"orientation": "vertical", "xField": x_field, "showValue": "never", "stacking": "none",
                   "groupWidth": 0.8, "barWidth": 0.9, "barRadius": 0, "fullHighlight": False,
                   "xTickLabelRotation": 0, "xTickLabelMaxLength": 4, "xTickLabelSpacing": 0,
                   "legend": {"calcs": [], "displayMode": "list", "placement": "bottom", "showLegend": False},
                   "tooltip": {"mode": "single", "sort": "none"}}
        custom = {"fillOpacity": 80, "gradientMode": "none", "lineWidth": 1, "axisPlacement": "auto",
                  "axisLabel": "", "axisCenteredZero": False, "axisBorderShow": False,
                  "scaleDistribution": {"type": "linear"}, "thresholdsStyle": {"mode": "off"},
                  "hideFrom": {"legend": False, "tooltip": False, "viz": False}}
        self.panel("barchart", title, description, targets, unit, w, h, options, custom,
                   extra={"transformations": transformations}, min=0)

    def heatmap(self, title: str, description: str, targets: list[Json], unit: str, interval: str,
                w: int = 12, h: int = 10) -> None:
        options = {"calculate": False, "cellGap": 1, "showValue": "never",
                   "rowsFrame": {"layout": "auto"},
                   "color": {"mode": "scheme", "scheme": "Oranges", "fill": "dark-orange", "scale": "exponential",
                             "exponent": 0.5, "steps": 64, "reverse": False},
                   "yAxis": {"axisPlacement": "left", "axisLabel": "UTC hour of day", "reverse": True},
                   "cellValues": {"unit": unit},
                   "legend": {"show": True}, "tooltip": {"mode": "single", "yHistogram": False,
                                                          "showColorScale": True},
                   "exemplars": {"color": "rgba(255,0,255,0.7)"}, "filterValues": {"le": 1e-9}}
        custom = {"hideFrom": {"legend": False, "tooltip": False, "viz": False},
                  "scaleDistribution": {"type": "linear"}}
        self.panel("heatmap", title, description, targets, unit, w, h, options, custom,
                   extra={"interval": interval})

    def xychart(self, title: str, description: str, targets: list[Json], unit: str, transformations: list[Json],
                overrides: list[Json], w: int = 12, h: int = 10) -> None:
        """Points and lines over a numeric x axis: after `transformations`, one table whose first number
        field is x and whose other number fields are the series."""
        options = {"mapping": "auto", "series": [],
                   "legend": {"calcs": [], "displayMode": "list", "placement": "bottom", "showLegend": True},
                   "tooltip": {"mode": "multi", "sort": "none"}}
        custom = {"show": "lines", "lineWidth": 2, "pointSize": {"fixed": 5}, "fillOpacity": 50,
                  "axisPlacement": "auto", "axisLabel": "", "axisBorderShow": False, "axisCenteredZero": False,
                  "scaleDistribution": {"type": "linear"}, "hideFrom": {"legend": False, "tooltip": False,
                                                                       "viz": False}}
        self.panel("xychart", title, description, targets, unit, w, h, options, custom, min=0,
                   extra={"transformations": transformations})
        self.panels[-1]["fieldConfig"]["overrides"] = overrides

    # -- the dashboard ------------------------------------------------------------------
    def json(self) -> Json:
        return {
            "uid": self.uid, "title": self.title, "description": self.description, "tags": TAGS,
            "editable": True, "graphTooltip": 1, "schemaVersion": SCHEMA_VERSION, "version": 1,
            "refresh": "1m", "time": {"from": "now-24h", "to": "now"}, "timepicker": {}, "timezone": "browser",
            "fiscalYearStartMonth": 0, "liveNow": False, "weekStart": "",
            "annotations": {"list": [{
                "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
                "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
                "type": "dashboard"}]},
            "links": [{"title": "llmmeter", "type": "dashboards", "tags": TAGS, "asDropdown": True,
                       "includeVars": True, "keepTime": True, "icon": "external link", "targetBlank": False,
                       "tooltip": ""}],
            "templating": {"list": [datasource_var(), label_var("tenant", "Tenant"), label_var("model", "Model"),
                                    label_var("upstream", "Upstream"), *self.extra_vars]},
            "panels": self.panels,
        }


def datasource_var() -> Json:
    return {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
            "current": {"text": "Prometheus", "value": "prometheus"}, "hide": 0, "refresh": 1, "regex": "",
            "options": [], "skipUrlSync": False}


def label_var(label: str, title: str) -> Json:
    query = f"label_values(llmmeter_requests_total, {label})"
    return {"name": label, "label": title, "type": "query", "datasource": DS,
            "query": {"qryType": 1, "query": query, "refId": "PrometheusVariableQueryEditor"},
            "refresh": 2, "includeAll": True, "allValue": ".*", "multi": True, "sort": 1, "regex": "",
            "current": {"text": ["All"], "value": ["$__all"]}, "options": [], "hide": 0, "skipUrlSync": False}


def budget_var() -> Json:
    """The [[budget]] tables of llmmeter.toml, by name (their gauges exist from start-up)."""
    return {"name": "budget", "label": "Budget", "type": "query", "datasource": DS,
            "query": {"qryType": 1, "query": "label_values(llmmeter_budget_limit_usd, budget)",
                      "refId": "PrometheusVariableQueryEditor"},
            "description": "The [[budget]] tables of llmmeter.toml (the Budgets row).",
            "refresh": 2, "includeAll": True, "allValue": ".*", "multi": True, "sort": 1, "regex": "",
            "current": {"text": ["All"], "value": ["$__all"]}, "options": [], "hide": 0, "skipUrlSync": False}


def nodes_var() -> Json:
    values = ["1", "2", "3", "4", "6", "8"]
    return {"name": "nodes", "label": "Self-hosting nodes", "type": "custom", "query": ",".join(values),
            "description": "Nodes assumed for the capacity lines (llmmeter.toml [selfhost] nodes; default 2: "
                           "a second node for redundancy).",
            "current": {"text": "2", "value": "2"}, "includeAll": False, "multi": False, "hide": 0,
            "options": [{"text": v, "value": v, "selected": v == "2"} for v in values], "skipUrlSync": False}


# ---------------------------------------------------------------------------------------
def cost() -> Board:
    b = Board("llmmeter-cost", "llmmeter / Cost",
              "What the API costs: spend today, this month and projected; each budget's burn-down, when it "
              "runs out, and what it refused; by model, tier, tenant and tag; tokens by type; the cache's hit "
              "ratio and savings, and its writes by lifetime; per-call fees; the provider's own cost beside "
              "llmmeter's; the prices in force.", extra_vars=[budget_var()])
    b.row("Spend")
    b.stat("Spend today", "What calls cost since midnight (dashboard time zone), fees included, from the cost "
           "counter. Filtered by tenant and model.",
           [q(f"sum(increase(llmmeter_cost_usd_total{{{TM}}}[$__range]))", "today", instant=True)],
           USD, extra={"timeFrom": "now/d", "hideTimeOverride": False})
    b.stat("Month to date", "This UTC month's spend as the ledger has it (exact, from llmmeter's database). "
           "Filtered by tenant, not by model.",
           [q('sum(llmmeter:month_to_date_cost_usd{tenant=~"$tenant", tenant!="all"})', "month to date",
              instant=True)], USD)
    b.stat("Projected month", "Month to date carried at this month's run-rate to the month's end (the report's "
           "forecast). Early in a month it swings; compare it with the budget.",
           [q('sum(llmmeter:projected_month_cost_usd{tenant=~"$tenant", tenant!="all"})', "projected",
              instant=True)], USD)
    b.stat("Spend rate (USD per hour)", "The last five minutes' spend, fees included, per hour. Times 730 is a "
           "month at this pace.",
           [q(f"sum(llmmeter:cost_usd_per_hour:rate5m{{{TM}}})", "USD/h", instant=True)], USD)
    b.stat("Saved by the cache", "What cache reads saved (and cache writes cost extra) against paying the input "
           "price for those tokens, over the dashboard's time range. The report's without_cache what-if minus "
           "the real cost.",
           [q(f'sum(increase(llmmeter_tokens_total{{{TM}, {CACHE_TYPES}}}[$__range]) '
              "* on (model, tier, type) group_left () llmmeter:cache_saving_usd_per_million) / 1e6",
              "saved", instant=True)], USD, steps=GREEN)
    b.bargauge("Budget used this month", "Month-to-date spend as a share of each legacy monthly budget "
               "([budget] monthly_usd as 'all', [[tenant]] monthly_budget_usd). Empty when none is set. These "
               "only alert; [[budget]] tables are in the Budgets row.",
               [q("llmmeter:month_to_date_cost_usd / on (tenant) (max by (tenant) (llmmeter_monthly_budget_usd) "
                  "> 0)", "{{tenant}}", instant=True)],
               RATIO, w=4, h=4, steps=thresholds((None, "green"), (0.8, "orange"), (1, "red")), max_=1)

    b.row("Budgets")
    spent = f"max by (budget) (llmmeter_budget_spent_usd{{{B}}})"
    b.timeseries("Budget burn-down", "Each [[budget]]'s spent in its current period (the ledger's priced cost of "
                 "the requests it matches, the same on every replica) against its limit, and where spent will be "
                 "in 6 hours at the last hour's spend rate. Spent falls to 0 when a period (a day or a month in "
                 "the budget's time zone) ends.",
                 [q(spent, "{{budget}} spent"),
                  q(f"max by (budget) (llmmeter_budget_limit_usd{{{B}}})", "{{budget}} limit"),
                  q(f"{spent} + on (budget) llmmeter:budget_spend_usd_per_hour:deriv1h{{{B}}} * 6",
                    "{{budget}} in 6 h at this rate")], USD)
    b.bargauge("Budget used", "Spent as a share of the limit in the current period. An enforced budget refuses "
               "requests (429 budget_exceeded) that would take it past 100%; an alert-mode one only alerts.",
               [q(f"sort_desc(llmmeter:budget_used:ratio{{{B}}})", "{{budget}}", instant=True)], RATIO, w=6,
               steps=thresholds((None, "green"), (0.8, "orange"), (1, "red")), max_=1)
    b.bargauge("Runs out in", "The forecast: time until the limit is reached at the last hour's spend rate "
               "(0 once it is). Absent while a budget is not being spent, and for about an hour after its "
               "period starts again. Later than the period's end means it will last.",
               [q(f"sort(llmmeter:budget_exhausted_in_seconds:deriv1h{{{B}}})", "{{budget}}", instant=True)],
               SECONDS, w=6, steps=thresholds((None, "red"), (4 * 3600, "orange"), (86400, "green")))
    b.timeseries("Requests refused by budgets", "Per second, per budget: requests an enforced budget refused "
                 "with 429 budget_exceeded (they never reached an upstream; SDKs do not retry them), with 503 "
                 "while the ledger's database was unreachable, or because their model has no price.",
                 [q(f"sum by (budget) (rate(llmmeter_budget_rejections_total{{{B}}}[$__rate_interval]))",
                    "{{budget}}")], REQ_S, w=8)
    b.timeseries("Reserved in flight", "The worst-case cost of requests admitted and not yet in the ledger, "
                 "summed over replicas. It is held against the limit until each request's record is imported.",
                 [q(f"sum by (budget) (llmmeter_budget_reserved_usd{{{B}}})", "{{budget}}")], USD, w=8)
    b.bargauge("Overrun of reservations in range", "What requests cost beyond their reservation (estimated "
               "usage, server tools adding input), over the dashboard's time range: the most a period can end "
               "above its limit. Such records are flagged over_reservation.",
               [q(f"sort_desc(sum by (budget) (increase(llmmeter_budget_overrun_usd_total{{{B}}}[$__range])))",
                  "{{budget}}", instant=True)], USD, w=8)

    b.row("Where the money goes")
    b.timeseries("Spend rate by model and tier", "USD per hour, stacked. Highspeed costs about twice standard "
                 "for the same tokens: a wide highspeed band is latency being bought.",
                 [q(f"sum by (model, tier) (llmmeter:cost_usd_per_hour:rate5m{{{TM}}})", "{{model}} {{tier}}")],
                 USD, stack=True)
    b.timeseries("Spend rate by tenant", "USD per hour, stacked, per tenant (from the proxy keys).",
                 [q(f"sum by (tenant) (llmmeter:cost_usd_per_hour:rate5m{{{TM}}})", "{{tenant}}")], USD, stack=True)
    b.bargauge("Spend in range by model and tier", "Total over the dashboard's time range, fees included.",
               [q(f"sort_desc(sum by (model, tier) (increase(llmmeter_cost_usd_total{{{TM}}}[$__range])))",
                  "{{model}} {{tier}}", instant=True)], USD, w=8)
    b.bargauge("Spend in range by tenant", "Total over the dashboard's time range, fees included.",
               [q(f"sort_desc(sum by (tenant) (increase(llmmeter_cost_usd_total{{{TM}}}[$__range])))",
                  "{{tenant}}", instant=True)], USD, w=8)
    b.piechart("Spend by billing category", "Input, cache read, 5-minute and 1-hour cache writes, output "
               "(reasoning is billed as output), and per-call fees (web_search). Output usually dominates; a "
               "large input share is where caching would pay.",
               [q(f"sum by (type) (increase(llmmeter_cost_usd_total{{{TM}}}[$__range]))", "{{type}}",
                  instant=True)], USD, w=8)
    b.bargauge("Spend by tag and workload", "X-LLMMeter-Tag (only tags declared in llmmeter.toml; others are "
               "'other') and workload class by input-side tokens. Not filtered by tenant or model: the counter "
               "has neither label.",
               [q("sort_desc(sum by (tag, workload) (increase(llmmeter_tagged_cost_usd_total[$__range])))",
                  "{{tag}} / {{workload}}", instant=True)], USD, w=12)
    b.timeseries("Requests by upstream and outcome", "Calls per second through each upstream; anything but 'ok' "
                 "is explained on the Latency and reliability dashboard. Cost counters carry no upstream label, "
                 "so this is the panel the upstream variable filters.",
                 [q(f"sum by (upstream, outcome) (rate(llmmeter_requests_total{{{U}, {TM}}}[$__rate_interval]))",
                    "{{upstream}} {{outcome}}")], REQ_S, stack=True)

    b.row("Tokens and cache")
    b.timeseries("Tokens per second by type", "The five billing categories (input, cache read, 5-minute and "
                 "1-hour cache writes, output), stacked. They partition the tokens: nothing is counted twice.",
                 [q(f"sum by (type) (llmmeter:tokens_per_second:rate5m{{{TM}}})", "{{type}}")], TOKENS_S,
                 stack=True)
    b.bargauge("Tokens in range by type", "Totals over the dashboard's time range. Reasoning tokens are a part "
               "of output, shown beside it.",
               [q(f"sum by (type) (increase(llmmeter_tokens_total{{{TM}}}[$__range]))", "{{type}}", instant=True),
                q(f"sum(increase(llmmeter_reasoning_tokens_total{{{TM}}}[$__range]))", "reasoning (of output)",
                  instant=True)], TOKENS)
    b.timeseries("Cache-hit ratio by model and tier", "cache_read ÷ the whole input side (input, cache reads, "
                 "5-minute and 1-hour cache writes), as in the monthly report. A high ratio makes the API "
                 "cheaper, and a self-hosted node's prefill lighter.",
                 [q(f'sum by (model, tier) (llmmeter:tokens_per_second:rate5m{{{TM}, type="cache_read"}}) '
                    f"/ sum by (model, tier) (llmmeter:tokens_per_second:rate5m{{{TM}, {INPUT_SIDE}}})",
                    "{{model}} {{tier}}")], RATIO, max_=1)
    b.stat("Cache-hit ratio in range", "Over the dashboard's time range.",
           [q(f'sum(increase(llmmeter_tokens_total{{{TM}, type="cache_read"}}[$__range])) '
              f"/ sum(increase(llmmeter_tokens_total{{{TM}, {INPUT_SIDE}}}[$__range]))", "cache hit", instant=True)],
           RATIO, w=4, h=8)
    b.timeseries("Saved by the cache (USD per hour)", "Savings rate by model and tier; negative when cache "
                 "writes cost more than they save.",
                 [q(f"sum by (model, tier) (llmmeter:cache_saved_usd_per_hour:rate5m{{{TM}}})", "{{model}} {{tier}}")],
                 USD, w=8, min_=None)

    b.timeseries("Cache writes by lifetime (USD per hour)", "What cache writes cost, 5-minute and 1-hour apart, "
                 "by model. A 1-hour write costs more (about 2x input on Anthropic against 1.25x) and pays off only "
                 "when the prefix is read again after five minutes.",
                 [q(f"sum by (model, type) (rate(llmmeter_cost_usd_total{{{TM}, {CACHE_WRITES}}}[$__rate_interval]))"
                    " * 3600", "{{model}} {{type}}")], USD, stack=True)
    b.bargauge("Cache writes in range by lifetime", "Tokens written to the cache over the dashboard's time "
               "range: cache_write is the 5-minute lifetime, cache_write_1h the 1-hour one.",
               [q(f"sum by (type) (increase(llmmeter_tokens_total{{{TM}, {CACHE_WRITES}}}[$__range]))", "{{type}}",
                  instant=True)], TOKENS)

    b.row("Fees and the provider's own cost")
    b.stat("Fees in range", "Per-call fees (web search calls at the price table's web_search_per_1k) over the "
           "dashboard's time range. They are part of every spend figure on these dashboards: the cost counter "
           "holds them under type web_search.",
           [q(f"sum(increase(llmmeter_fees_usd_total{{{TM}}}[$__range]))", "fees", instant=True)], USD, w=4, h=8)
    b.timeseries("Fees by model and kind (USD per hour)", "Per-call fees, stacked: web search calls priced per "
                 "1,000. Calls to a model whose entry has no fee price cost 0 here and are flagged fee_unpriced.",
                 [q(f"sum by (model, fee) (rate(llmmeter_fees_usd_total{{{TM}}}[$__rate_interval])) * 3600",
                    "{{model}} {{fee}}")], USD, w=8, stack=True)
    b.bargauge("Provider's cost beside llmmeter's, in range", "Where the upstream reports what a call cost "
               "(OpenRouter usage.cost, xAI cost_in_usd_ticks): its figure, and llmmeter's own cost of the same "
               "calls. A gap means a price table is out of date, or the provider bills something llmmeter does "
               "not price; `llmmeter reconcile` explains it call by call.",
               [q(f"sum by (model) (increase(llmmeter_provider_cost_usd_total{{{TM}}}[$__range]))",
                  "{{model}} provider", instant=True),
                q(f"sum by (model) (increase(llmmeter_provider_costed_usd_total{{{TM}}}[$__range]))",
                  "{{model}} llmmeter", instant=True)], USD, w=8)
    b.stat("Provider over llmmeter", "The provider's own figure over llmmeter's cost of the same calls, in the "
           "range, minus one: 0% agrees, +5% means the provider billed 5% more than the price tables say.",
           [q(f"sum(increase(llmmeter_provider_cost_usd_total{{{TM}}}[$__range])) "
              f"/ sum(increase(llmmeter_provider_costed_usd_total{{{TM}}}[$__range])) - 1", "difference",
              instant=True)], RATIO, w=4, h=8,
           steps=thresholds((None, "green"), (0.01, "orange"), (0.05, "red")), decimals=1)

    live_load(b)
    cost_curve(b)

    b.row("Prices")
    b.table("Prices in force (USD per million tokens)", "From llmmeter's price tables, as in force now "
            "(llmmeter prices show prints the same). A price change is a new table entry with a later date.",
            [q(f"max by (model, tier, type) (llmmeter_price_per_million_usd{{{M}}})", "{{type}}", instant=True)],
            USD, [{"id": "joinByLabels", "options": {"value": "type", "join": ["model", "tier"]}}], w=16)
    b.stat("Unpriced calls in range", "Calls to models with no price entry: their cost is unknown, so every "
           "figure above is low by that much. The monthly report names the models.",
           [q("sum(increase(llmmeter_unpriced_requests_total[$__range])) or vector(0)", "unpriced", instant=True)],
           "none", w=8, h=8, steps=thresholds((None, "green"), (1, "red")), decimals=0)
    return b


def live_load(b: Board) -> None:
    """The report's load_by_minute, live (docs/metrics.md "Live load"): 1-minute rates of counters each
    request adds its exact share to when it ends, and the node profiles' capacities."""
    counted_at_end = ("Each request is counted when it ends, so a long request's whole load shows in the "
                      "minute it ends; the monthly report's load_by_minute spreads it over its minutes.")
    b.row("Live load and nodes needed now")
    b.timeseries("Requests in flight", "Mean requests in flight in each minute (seconds in flight per second), "
                 f"by model: the report's requests_in_flight, live. {counted_at_end} 'under way' is the requests "
                 "being relayed at each scrape (llmmeter_requests_in_flight, every model), which shows a long "
                 "request while it runs.",
                 [q(f"sum by (model) (rate(llmmeter_in_flight_seconds_total{{{M}}}[1m]))", "{{model}}"),
                  q("sum(llmmeter_requests_in_flight)", "under way")], "none", w=8)
    b.timeseries("KV tokens in flight", "Mean KV-cache tokens held by the requests in flight in each minute: "
                 "each request's input side plus the output produced so far. This is what a node's KV cache "
                 f"must hold (the report's kv_tokens_in_flight, live). {counted_at_end}",
                 [q(f"sum by (model) (rate(llmmeter_kv_token_seconds_total{{{M}}}[1m]))", "{{model}}")],
                 TOKENS, w=8, stack=True)
    b.timeseries("Prefill and decode tokens per second, by the minute", "Input-side tokens (prefill) and output "
                 "tokens (decode) per second over 1-minute windows, of requests served live (batch results "
                 f"excluded): the report's prefill_tokens_per_s and decode_tokens_per_s. {counted_at_end}",
                 [q(f"sum(rate(llmmeter_prefill_tokens_total{{{M}}}[1m]))", "prefill"),
                  q(f"sum(rate(llmmeter_decode_tokens_total{{{M}}}[1m]))", "decode")], TOKENS_S, w=8)
    b.timeseries("Nodes needed now by profile", "For each node profile ([[selfhost.node]], or the shipped ones), "
                 "the largest over KV cache, prefill and decode of ⌈this minute's load ÷ the node's capacity⌉ "
                 "(llmmeter_selfhost_node_capacity), as the report computes needed_peak; all traffic, every model. "
                 "Add one node for redundancy. The capacities are vendor claims or assumptions: the report's "
                 "nodes section gives each one's source.",
                 [q("llmmeter:selfhost_nodes_needed:rate1m", "{{node}}")], "none", w=16)
    b.table("Binding limit now by profile", "For each node profile, the limit that decides how many nodes this "
            "minute needs (kv_cache, prefill or decode) and the load as a multiple of one node's capacity for "
            "it: above 1, one node is not enough.",
            [q("topk by (node) (1, llmmeter:selfhost_node_load:ratio_rate1m)", "{{node}}", instant=True,
               fmt="table")], TIMES,
            [{"id": "organize", "options": {"excludeByName": {"Time": True},
                                            "renameByName": {"Value": "load ÷ one node's capacity"}}}], w=8)


# The report's cost curve (docs/metrics.md "Cost curve"): each point's utilisation and cost are two
# gauges sharing a `point` label; joinByLabels makes them one table, a row per point, a column per axis.
# Replicas sharing a ledger export the same curve: max by (node, point) keeps one of each.
CURVE_X = 'label_replace(max by (node, point) (llmmeter_cost_curve_utilisation), "axis", "utilisation", "", "")'
CURVE_SELF = ('label_replace(max by (node, point) (llmmeter_cost_curve_self_hosted_usd_per_million_tokens), "axis", '
              '"self-hosted", "", "")')
CURVE_API = ('label_replace(max by (node, point) (llmmeter_cost_curve_utilisation) * 0 + on () group_left () '
             'max(llmmeter_cost_curve_api_usd_per_million_tokens), "axis", "API", "", "")')
CURVE_YOU = ('label_replace(max by (node, point) (llmmeter_cost_curve_self_hosted_usd_per_million_tokens'
             '{point="measured"}), "axis", "measured utilisation", "", "")')


def _named(name: str, **custom: Any) -> Json:
    return {"matcher": {"id": "byName", "options": name},
            "properties": [{"id": f"custom.{k}", "value": v} for k, v in custom.items()]}


def cost_curve(b: Board) -> None:
    """The report's cost_curve for the UTC month so far, and its measured and break-even utilisations."""
    b.row("Self-hosting against the API: cost by utilisation")
    b.xychart("Cost per million tokens by utilisation", "The monthly report's cost curve for this UTC month so "
              "far: USD per million tokens on the cheapest node profile at its nodes with redundancy, by how "
              "busy it is (0 to 1), against what the API cost per million tokens this month; the dot is the "
              "measured utilisation. Where the self-hosted line falls below the API's, self-hosting is "
              "cheaper. The node figures are vendor claims and assumptions (the report's nodes section gives "
              "each one's source); the whole month, every tenant and model, as `llmmeter report` has it.",
              [q(CURVE_X, "{{axis}} {{point}}", instant=True), q(CURVE_SELF, "{{axis}} {{point}}", instant=True),
               q(CURVE_API, "{{axis}} {{point}}", instant=True), q(CURVE_YOU, "{{axis}} {{point}}", instant=True)],
              USD,
              [{"id": "joinByLabels", "options": {"value": "axis", "join": ["point"]}},
               {"id": "sortBy", "options": {"fields": {}, "sort": [{"field": "utilisation", "desc": False}]}},
               {"id": "organize", "options": {"excludeByName": {"point": True}, "indexByName": {
                   "utilisation": 0, "self-hosted": 1, "API": 2, "measured utilisation": 3}}}],
              [{"matcher": {"id": "byName", "options": "utilisation"},
                "properties": [{"id": "unit", "value": RATIO}, {"id": "max", "value": 1}]},
               _named("measured utilisation", show="points", pointSize={"fixed": 12})], w=24)
    b.stat("Measured utilisation", "The month so far's mean over every minute of the largest of the three "
           "loads (KV cache, prefill, decode) over the deployment's capacity: the dot on the curve.",
           [q('max by (node) (llmmeter_cost_curve_utilisation{point="measured"})', "{{node}}", instant=True)],
           RATIO, w=6, decimals=2)
    b.stat("Break-even utilisation", "The utilisation at which the deployment's cost per million tokens meets "
           "the API's (the report's breakeven_utilisation): self-hosting is cheaper above it. Above 100%, it "
           "does not win even fully used.",
           [q("max by (node) (llmmeter_cost_curve_breakeven_utilisation)", "{{node}}", instant=True)], RATIO, w=6,
           decimals=2)
    b.stat("API per million tokens", "What the API cost per million tokens this UTC month so far: its cost "
           "over its tokens of the four billing categories, self-hosted upstreams left out.",
           [q("max(llmmeter_cost_curve_api_usd_per_million_tokens)", "API", instant=True)], USD, w=6)
    b.stat("Self-hosted deployment per month", "The monthly cost of the deployment the curve is for: the "
           "cheapest node profile at its nodes with redundancy (rent or amortised capex, power, operations).",
           [q("max by (node, nodes) (llmmeter_cost_curve_monthly_cost_usd)", "{{nodes}} x {{node}}",
              instant=True)], USD, w=6)


def latency() -> Board:
    b = Board("llmmeter-latency", "llmmeter / Latency and reliability",
              "How fast and how reliably calls go through: time to first token and duration percentiles, what "
              "the proxy itself adds, errors by status and kind, how much usage had to be estimated, and "
              "whether the ledger keeps up.")

    def quantiles(bucket: str, by: str, filt: str, legend: str,
                  qs: tuple[float, ...] = (0.5, 0.95, 0.99)) -> list[Json]:
        return [q(f"histogram_quantile({x}, sum by (le, {by}) ({bucket}{{{filt}}}))", f"p{round(x * 100)} {legend}")
                for x in qs]

    all_calls = f"sum(rate(llmmeter_requests_total{{{U}, {TM}}}[$__rate_interval]))"

    b.row("Speed")
    b.stat("TTFT p95", "Time to first token of streamed calls, 95th percentile over five minutes: from the "
           "request's arrival to the first content, reasoning or tool-call delta.",
           [q(f"histogram_quantile(0.95, sum by (le) (llmmeter:time_to_first_token_seconds_bucket:rate5m{{{M}}}))",
              "TTFT p95", instant=True)], SECONDS)
    b.stat("Duration p95", "Whole-call duration, 95th percentile over five minutes, streams included.",
           [q(f"histogram_quantile(0.95, sum by (le) (llmmeter:request_duration_seconds_bucket:rate5m{{{M}}}))",
              "duration p95", instant=True)], SECONDS)
    b.stat("Proxy overhead p99", "The time llmmeter itself adds to a call (its benchmark: about half a "
           "millisecond at p50). A rise here is llmmeter's problem, not the upstream's.",
           [q("histogram_quantile(0.99, sum by (le) (llmmeter:proxy_overhead_seconds_bucket:rate5m))",
              "overhead p99", instant=True)], SECONDS)
    b.stat("Calls per second", "Everything through the proxy, errors included.",
           [q(all_calls, "calls/s", instant=True)], REQ_S)
    b.stat("Error share", "Share of calls whose client got anything but 2xx, over the rate interval; 0 when "
           "there were no calls.",
           [q(f'(sum(rate(llmmeter_requests_total{{{U}, {TM}, code!~"2.."}}[$__rate_interval])) or vector(0)) '
              f"/ ({all_calls} > 0) or vector(0)", "errors", instant=True)], RATIO,
           steps=thresholds((None, "green"), (0.01, "orange"), (0.05, "red")))
    b.stat("Targets up", "llmmeter processes Prometheus can scrape, of those it knows.",
           [q('sum(up{job="llmmeter"})', "up", instant=True), q('count(up{job="llmmeter"})', "known", instant=True)],
           "none", steps=GREEN, decimals=0)
    b.timeseries("Time to first token by model and tier", "p50, p95 and p99 of streamed calls. Highspeed "
                 "should sit well below standard; a gap that closes means the tier is not delivering.",
                 quantiles("llmmeter:time_to_first_token_seconds_bucket:rate5m", "model, tier", M,
                           "{{model}} {{tier}}"), SECONDS)
    b.timeseries("Duration by model and endpoint", "p50, p95 and p99 of whole calls. The duration histogram "
                 "carries endpoint and model, not tier.",
                 quantiles("llmmeter:request_duration_seconds_bucket:rate5m", "model, endpoint", M,
                           "{{model}} {{endpoint}}"), SECONDS)
    b.timeseries("Proxy overhead by endpoint", "p50 and p99 of the time llmmeter adds (parsing, pricing, "
                 "journaling, metrics), per endpoint.",
                 quantiles("llmmeter:proxy_overhead_seconds_bucket:rate5m", "endpoint", 'endpoint=~".+"',
                           "{{endpoint}}", (0.5, 0.99)), SECONDS)
    b.timeseries("Input-side tokens per call", "p50 and p95 of input + cache read + cache write per call, by "
                 "model: long-document traffic shows as a high p95.",
                 [q(f"histogram_quantile({x}, sum by (le, model) (rate(llmmeter_request_input_tokens_bucket"
                    f"{{{M}}}[$__rate_interval])))", f"p{round(x * 100)} {{{{model}}}}") for x in (0.5, 0.95)],
                 TOKENS)

    b.row("Errors")
    b.timeseries("Error rate by status code", "Share of calls whose client got each non-2xx status (0: no "
                 "response was sent). 401 is a missing or unknown proxy key, 404 an unrouted model, 5xx and "
                 "429 came from the upstream.",
                 [q(f'sum by (code) (rate(llmmeter_requests_total{{{U}, {TM}, code!~"2.."}}[$__rate_interval])) '
                    f"/ ignoring (code) group_left () {all_calls}", "{{code}}")], RATIO, stack=True)
    b.timeseries("Upstream failures by kind", "Per second, per upstream: http_error (5xx and 429), "
                 "unreachable, timeout, reset. Retries and failover are not llmmeter's job yet: these reached "
                 "the client.",
                 [q(f"sum by (upstream, kind) (rate(llmmeter_upstream_errors_total{{{U}}}[$__rate_interval]))",
                    "{{upstream}} {{kind}}")], REQ_S, stack=True)
    b.timeseries("Upstream error ratio", "Failures per call sent, over five minutes. The dashed line is the "
                 "alert threshold (5% for 10 minutes).",
                 [q(f"llmmeter:upstream_error:ratio_rate5m{{{U}}}", "{{upstream}}")], RATIO, limit_line=0.05)
    b.timeseries("Calls by outcome", "ok, upstream_http_error, upstream_unreachable, upstream_timeout, "
                 "upstream_reset, upstream_empty (a 2xx stream with no event), client_closed (the client "
                 "left mid-call) and rejected (refused by llmmeter).",
                 [q(f"sum by (outcome) (rate(llmmeter_requests_total{{{U}, {TM}}}[$__rate_interval]))", "{{outcome}}")],
                 REQ_S, stack=True)

    b.timeseries("Refusals before a key is known", "Per second, by reason: missing_key (no key sent) and "
                 "unknown_key (a key no tenant holds). The ledger keeps one record per minute and reason for "
                 "them, not one per request; a steady line is a misconfigured client or someone probing.",
                 [q("sum by (reason) (rate(llmmeter_refusals_total[$__rate_interval]))", "{{reason}}")],
                 REQ_S, stack=True)

    b.row("Metering health")
    b.timeseries("Estimated-usage share", "Share of metered calls whose tokens llmmeter had to count itself "
                 "(no usage from the upstream, a cut stream, a client that left). Over 30 minutes and over a "
                 "day; the alert fires when the first passes 10% and twice the second.",
                 [q(f"llmmeter:estimated_usage:ratio_rate30m{{{M}}}", "{{model}} 30m"),
                  q(f"llmmeter:estimated_usage:ratio_rate1d{{{M}}}", "{{model}} 1d")], RATIO, max_=1)
    b.timeseries("Ledger backlog", "Records journaled but not yet in the database, per process. It drains "
                 "every batch; a backlog that only grows means the database is failing (/readyz says so too).",
                 [q("max by (instance) (llmmeter_ledger_pending_records)", "{{instance}}")], "count:records")
    b.timeseries("Metering faults and refused records", "What went wrong without breaking the relay, per hour: "
                 "usage fields or streams the readers could not use, compressed bodies that would not decode, "
                 "prices that failed (by kind), and records the ledger's database refused (kept in the "
                 "dead-letter folder for `llmmeter ledger retry`) or lost. Each has an alert.",
                 [q("sum by (kind) (increase(llmmeter_metering_faults_total[1h]))", "{{kind}}"),
                  q("sum (increase(llmmeter_ledger_rejected_records_total[1h]))", "refused by the database"),
                  q("sum (increase(llmmeter_ledger_lost_records_total[1h]))", "lost")], "count:records")
    return b


def selfhosting() -> Board:
    b = Board("llmmeter-selfhosting", "llmmeter / Self-hosting signals",
              "The measurements that decide whether to host the model yourself: daily tokens, when in the day "
              "they come, how high the peaks are against a node's throughput, and the API's cost against the "
              "monthly cost of nodes from llmmeter.toml [selfhost].", extra_vars=[nodes_var()])
    range_rate = f"sum(increase(llmmeter_cost_usd_total{{{TM}}}[$__range])) / $__range_s * {MONTH_HOURS * 3600}"

    b.row("Volume")
    b.timeseries("Daily tokens", "Tokens per day by billing category, stacked. What a self-hosted node would "
                 "have to process.",
                 [q(f"sum by (type) (increase(llmmeter_tokens_total{{{TM}}}[$__interval]))", "{{type}}")],
                 TOKENS, stack=True, bars=True, interval="1d", w=16)
    b.stat("Tokens per day", "Average over the dashboard's time range (pick 7 or 30 days).",
           [q(f"sum(increase(llmmeter_tokens_total{{{TM}}}[$__range])) / ($__range_s / 86400)", "tokens/day",
              instant=True)], TOKENS, w=4, h=8)
    b.stat("Tokens per month at this rate", "The range's average carried over a 730-hour month; compare it "
           "with the break-even volume below.",
           [q(f"sum(increase(llmmeter_tokens_total{{{TM}}}[$__range])) / $__range_s * {MONTH_HOURS * 3600}",
              "tokens/month", instant=True)], TOKENS, w=4, h=8)
    b.heatmap("Tokens by hour of day (UTC)", "One column a day, one row an hour of the UTC day; the colour is "
              "the tokens that hour. A few hot rows mean sharp peaks (hard to self-host); an even sheet means "
              "24×7 load (nodes kept busy).",
              [q(f"sum by (hour) (avg_over_time(llmmeter:tokens_per_second_by_utc_hour:rate1m{{{TM}}}[1d])) * 3600",
                 "{{hour}}")], TOKENS, interval="1d")
    b.barchart("Hour-of-day profile (UTC)", "Tokens in an average hour at each hour of the UTC day over the time "
               "range. The monthly report shows the same in local time (--tz).",
               [q(f"{HOURLY_PROFILE} * 3600", "{{hour}}", instant=True, fmt="table")], TOKENS, "hour",
               [{"id": "sortBy", "options": {"fields": {}, "sort": [{"field": "hour", "desc": False}]}},
                {"id": "organize", "options": {"excludeByName": {"Time": True}, "renameByName": {"Value": "tokens"}}}],
               w=8, h=10)
    b.stat("Peak ÷ off-peak", "Mean tokens of the 4 busiest UTC hours of the day ÷ mean of the 12 quietest over "
           "the time range, hours without tokens counted as 0 and the ratio 0 when the quietest hours have none, "
           "as the monthly report defines peak_to_offpeak_ratio (in UTC). Read it over whole days; near 1 is flat "
           "load, above 3 is spiky.",
           [q(f"avg(topk(4, {HOURLY_TOTALS})) / (avg(bottomk(12, {HOURLY_TOTALS})) > 0) or vector(0)",
              "peak/off-peak", instant=True)], TIMES, w=4, h=10, decimals=1)

    b.row("Peak load against $nodes nodes")
    b.timeseries("Prefill and decode tokens per second", "Input-side tokens (prefill) and output tokens "
                 "(decode) per second, against what $nodes nodes are assumed to handle "
                 "(llmmeter_selfhost_node_tokens_per_second from [selfhost]). Above a capacity line, the nodes "
                 "would queue.",
                 [q(f"sum(llmmeter:tokens_per_second:rate5m{{{TM}, {INPUT_SIDE}}})", "prefill"),
                  q(f'sum(llmmeter:tokens_per_second:rate5m{{{TM}, type="output"}})', "decode"),
                  q('max(llmmeter_selfhost_node_tokens_per_second{phase="prefill"}) * $nodes',
                    "prefill capacity"),
                  q('max(llmmeter_selfhost_node_tokens_per_second{phase="decode"}) * $nodes', "decode capacity")],
                 TOKENS_S, w=16)
    b.bargauge("Load as a share of $nodes nodes", "Peak and mean over the time range of all traffic's prefill "
               "and decode rates, divided by the nodes' assumed throughput. Peaks over 100% would queue; a low "
               "mean is idle hardware being paid for.",
               [q(f"{f}_over_time(llmmeter:{p}_tokens_per_second:rate5m[$__range]) / on () "
                  f'(max(llmmeter_selfhost_node_tokens_per_second{{phase="{p}"}}) * $nodes)', f"{s} {p}",
                  instant=True)
                for s, f in (("peak", "max"), ("mean", "avg")) for p in ("prefill", "decode")],
               RATIO, w=8, steps=thresholds((None, "green"), (0.7, "orange"), (1, "red")))

    b.row("API cost against self-hosting")
    b.bargauge("Monthly cost: API against self-hosting", "The API at this time range's spend rate over a 730-hour "
               "month, the month projected from the ledger, and the monthly cost of self-hosting from [selfhost] "
               "(amortised nodes, power, operations). Cost counters cannot tell a self-hosted upstream's internal "
               "rate apart: keep it out of the model filter.",
               [q(range_rate, "API at this range's rate", instant=True),
                q('sum(llmmeter:projected_month_cost_usd{tenant=~"$tenant", tenant!="all"})', "API, month projected",
                  instant=True),
                q("max(llmmeter_selfhost_monthly_cost_usd)", "self-hosting", instant=True)], USD, w=12)
    b.stat("Volume multiple to break-even", "Self-hosting's monthly cost ÷ the API's at this range's rate: how "
           "many times today's traffic it takes before nodes are cheaper than the API.",
           [q(f"max(llmmeter_selfhost_monthly_cost_usd) / ({range_rate})", "multiple", instant=True)], TIMES,
           w=4, h=8, decimals=1)
    b.stat("Break-even tokens per month", "Self-hosting's monthly cost ÷ the API's average cost per token over "
           "the range (its cost, fees included, over the tokens of all five billing categories).",
           [q(f"max(llmmeter_selfhost_monthly_cost_usd) / (sum(increase(llmmeter_cost_usd_total{{{TM}}}[$__range])) "
              f"/ sum(increase(llmmeter_tokens_total{{{TM}}}[$__range])))", "tokens/month", instant=True)],
           TOKENS, w=4, h=8)
    b.bargauge("Calls by upstream in range", "Whole calls through each upstream over the time range (a "
               "hybrid set-up sends sensitive calls to the self-hosted one).",
               [q(f"sort_desc(round(sum by (upstream) (increase(llmmeter_requests_total{{{U}, {TM}}}[$__range]))))",
                  "{{upstream}}", instant=True)], "none", w=4, h=8, decimals=0)
    return b


BOARDS = {"llmmeter-cost.json": cost, "llmmeter-latency.json": latency, "llmmeter-selfhosting.json": selfhosting}


def render() -> dict[str, str]:
    return {name: json.dumps(build().json(), indent=2, ensure_ascii=False) + "\n" for name, build in BOARDS.items()}


def main(argv: list[str]) -> int:
    files = render()
    if "--check" in argv:
        stale = [n for n, text in files.items() if not (OUT / n).exists() or (OUT / n).read_text() != text]
        for n in stale:
            print(f"grafana/dashboards/{n} is not what grafana/build.py writes: run python grafana/build.py")
        return 1 if stale else 0
    OUT.mkdir(exist_ok=True)
    for name, text in files.items():
        (OUT / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
