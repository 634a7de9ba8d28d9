"""The report as one long CSV table with a leading `section` column (SPEC "Monthly report").

Rows and columns are the JSON format's; a text cell a client could have chosen (a model,
tenant or tag name) never opens as a spreadsheet formula (SPEC "Ledger").
"""

from __future__ import annotations

import io
import json
from typing import Any

from proxy.export import csv_writer, spreadsheet_text
from proxy.report.formats.alternatives import alternatives_csv
from proxy.report.formats.curve import curve_rows
from proxy.report.formats.json import report_dict
from proxy.report.formats.load import load_rows
from proxy.report.model import Report

SECTIONS: tuple[str, ...]  # widened below by the sections added after slo
SECTIONS = ("totals", "by_model", "by_tenant", "by_tag", "by_workload", "by_tag_workload", "daily", "hourly",
            "by_band", "speed", "budgets", "unpriced_estimated", "load_by_minute", "nodes", "slo")
SECTIONS += ("cost_curve", "decision", "alternatives")
# Version 3's columns come after every earlier one, so a reader of the earlier layout finds
# its columns where they were; the new sections' own columns follow them.
_V3_COLUMNS = ("cache_write_1h_tokens", "web_search_calls", "fees_usd", "provider_cost_usd")
_V3_SECTIONS = ("by_band", "speed", "budgets", "unpriced_estimated")
_V4_SECTIONS: tuple[str, ...]
_V4_SECTIONS = ("load_by_minute", "nodes", "slo")  # their columns after version 3's
_V4_SECTIONS += ("cost_curve", "decision", "alternatives")
# Columns whose text is a number llmmeter wrote: never altered.
_NUMBERS = frozenset({"cost_usd", "fees_usd", "provider_cost_usd", "limit_usd", "spent_usd", "rejected_cost_usd",
                      "cost_at_nearest_usd"})
_NUMBERS |= {"self_hosted_usd_per_mtok", "api_usd_per_mtok", "monthly_cost_usd", "api_cost_usd",
             "self_hosted_usd_per_mtok_at_measured"}


def render_csv(r: Report) -> str:
    d = report_dict(r)
    tables: list[tuple[str, list[dict[str, Any]]]] = [("totals", [d["totals"]])]
    tables += [(name, d[name]) for name in SECTIONS[1:7]] + [("hourly", d["hourly_profile"])]
    tables += [(name, d[name]) for name in _V3_SECTIONS[:-1]]
    tables += [("unpriced_estimated", d["unpriced_estimated"]["models"])]  # a row per model, tier and upstream
    tables += [("load_by_minute", load_rows(d["load_by_minute"])),
               ("nodes", [{k: v for k, v in x.items() if k != "profile"} for x in d["nodes"]]), ("slo", d["slo"])]
    tables += [("cost_curve", curve_rows(d["cost_curve"])), ("decision", d["decision"])]
    tables += [("alternatives", alternatives_csv(d["alternatives"]))]
    columns: list[str] = ["section"]
    for name, rows in tables:
        if name not in _V3_SECTIONS + _V4_SECTIONS:
            for row in rows:
                columns += [k for k in row if k not in columns and k not in _V3_COLUMNS]
    columns += _V3_COLUMNS
    for _, rows in tables:
        for row in rows:
            columns += [k for k in row if k not in columns]
    out = io.StringIO()
    w = csv_writer(out)
    w.writerow(columns)
    for name, rows in tables:
        for row in rows:
            w.writerow([name, *(_cell(k, row[k]) if k in row else "" for k in columns[1:])])
    return out.getvalue()


def _cell(column: str, value: Any) -> Any:
    if isinstance(value, dict):  # cost_by_model_tier: one cell, as the JSON report writes it
        value = json.dumps(value)
    if isinstance(value, str) and column not in _NUMBERS:
        return spreadsheet_text(value)
    return value
