"""The Grafana dashboards: current with grafana/build.py, well formed, and typed by Grafana's own schema.

No Grafana server runs here. What can be checked is: every dashboard type-checks against
npm @grafana/schema with `tsc --noEmit --strict` (a generated .ts file declares the JSON as
a Dashboard, and each panel as its plugin's panel type), and every query runs on a real
Prometheus (test_live.py).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.observability.stack import (
    CHECK_DIR,
    DASHBOARD_FILES,
    GRAFANA_DIR,
    TSC,
    Json,
    dashboards,
    panels,
    variables,
)
from tests.strict import require

UNITS = {"currencyUSD", "count:tokens", "count:tokens/s", "s", "percentunit", "reqps", "suffix:×", "none",
         "count:records"}


def test_dashboard_files_are_what_build_py_writes() -> None:
    r = subprocess.run([sys.executable, str(GRAFANA_DIR / "build.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [p.name for p in DASHBOARD_FILES] == ["llmmeter-cost.json", "llmmeter-latency.json",
                                                 "llmmeter-selfhosting.json"]


def test_dashboards_have_variables_units_and_descriptions() -> None:
    boards = dashboards()
    assert len({d["uid"] for d in boards}) == 3
    for d in boards:
        assert d["description"] and d["tags"] == ["llmmeter"]
        v = variables(d)
        assert v["datasource"]["type"] == "datasource" and v["datasource"]["query"] == "prometheus"
        for name in ("tenant", "model", "upstream"):
            assert v[name]["query"]["query"] == f"label_values(llmmeter_requests_total, {name})"
            assert v[name]["includeAll"] and v[name]["multi"]
        used = " ".join(t["expr"] for p in panels(d) for t in p["targets"])
        for name in v:
            if name != "datasource":
                assert f"${name}" in used, f"{d['title']}: ${name} filters nothing"
        for p in panels(d):
            where = f"{d['title']} / {p['title']}"
            assert len(p["description"]) > 30, where
            assert p["fieldConfig"]["defaults"]["unit"] in UNITS, where
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
            assert p["targets"] and all(t["datasource"] == p["datasource"] for t in p["targets"]), where


def test_panels_tile_the_grid_without_overlap() -> None:
    for d in dashboards():
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids))
        taken: set[tuple[int, int]] = set()
        for p in d["panels"]:
            g = p["gridPos"]
            assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
            cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not cells & taken, f"{d['title']} / {p['title']} overlaps another panel"
            taken |= cells


def test_cost_dashboard_covers_what_it_promises() -> None:
    cost, latency, selfhost = dashboards()
    text = {d["uid"]: json.dumps([t["expr"] for p in panels(d) for t in p["targets"]]) for d in dashboards()}
    for needle in ("llmmeter:month_to_date_cost_usd", "llmmeter:projected_month_cost_usd", "by (model, tier)",
                   "by (tenant)", "llmmeter_tokens_total", "cache_saving_usd_per_million",
                   "llmmeter_price_per_million_usd", "llmmeter_tagged_cost_usd_total", "cache_write_1h",
                   "llmmeter_fees_usd_total", "llmmeter_provider_cost_usd_total", "llmmeter_provider_costed_usd_total",
                   "llmmeter_budget_spent_usd", "llmmeter_budget_limit_usd", "llmmeter:budget_used:ratio",
                   "llmmeter:budget_exhausted_in_seconds:deriv1h", "llmmeter:budget_spend_usd_per_hour:deriv1h",
                   "llmmeter_budget_rejections_total", "llmmeter_budget_reserved_usd",
                   "llmmeter_budget_overrun_usd_total", '$budget'):
        assert needle in text["llmmeter-cost"], needle
    # The report's load_by_minute, live: 1-minute rates, and nodes needed now per profile with its binding limit.
    for needle in ("rate(llmmeter_in_flight_seconds_total{", "rate(llmmeter_kv_token_seconds_total{",
                   "rate(llmmeter_prefill_tokens_total{", "rate(llmmeter_decode_tokens_total{",
                   "llmmeter:selfhost_nodes_needed:rate1m", "topk by (node) (1, llmmeter:selfhost_node_load"):
        assert needle in text["llmmeter-cost"], needle
    counters = ("in_flight_seconds_total", "kv_token_seconds_total", "prefill_tokens_total")
    live = [p for p in panels(cost) if any(n in exprs(p) for n in counters)]
    assert len(live) == 3 and all("[1m])" in exprs(p) for p in live)
    for needle in ("time_to_first_token", "request_duration", "proxy_overhead", "by (code)",
                   "estimated_usage", "llmmeter_ledger_pending_records", "histogram_quantile(0.99"):
        assert needle in text["llmmeter-latency"], needle
    for needle in ("[$__interval]", "by_utc_hour", "topk(4", "bottomk(12", "llmmeter_selfhost_node_tokens_per_second",
                   "llmmeter_selfhost_monthly_cost_usd", "$nodes"):
        assert needle in text["llmmeter-selfhosting"], needle
    assert {p["type"] for p in panels(selfhost)} >= {"heatmap", "barchart"}
    assert [p.get("interval") for p in panels(selfhost) if p["title"] == "Daily tokens"] == ["1d"]
    assert [p.get("timeFrom") for p in panels(cost) if p["title"] == "Spend today"] == ["now/d"]
    assert latency["uid"] == "llmmeter-latency"
    # Each budget's burn-down: spent against its limit, and spent carried forward at its spend rate.
    [burn] = [p for p in panels(cost) if p["title"] == "Budget burn-down"]
    assert [t["legendFormat"] for t in burn["targets"]] == ["{{budget}} spent", "{{budget}} limit",
                                                            "{{budget}} in 6 h at this rate"]
    assert variables(cost)["budget"]["query"]["query"] == "label_values(llmmeter_budget_limit_usd, budget)"


# -- type-checking against @grafana/schema ----------------------------------------------------
def typecheck(tmp: Path, files: list[Path]) -> subprocess.CompletedProcess[str]:
    node = shutil.which("node")
    require(node is not None, "node is not installed (Debian package nodejs)")
    require(TSC.exists(), f"{TSC} is missing: run `npm ci` in grafana/check (make test does)")
    assert node is not None
    out = tmp / "generated"
    subprocess.run([node, str(CHECK_DIR / "generate.mjs"), "--out", str(out), *map(str, files)], check=True)
    tsconfig = json.loads((CHECK_DIR / "tsconfig.json").read_text())
    tsconfig["include"] = [str(out / "*.ts")]
    (tmp / "tsconfig.json").write_text(json.dumps(tsconfig))
    return subprocess.run([node, str(TSC), "--noEmit", "--strict", "-p", str(tmp / "tsconfig.json")],
                          capture_output=True, text=True, timeout=300)


def test_dashboards_type_check_against_grafana_schema(tmp_path: Path) -> None:
    r = typecheck(tmp_path, DASHBOARD_FILES)
    assert r.returncode == 0, r.stdout + r.stderr
    installed = json.loads((CHECK_DIR / "node_modules" / "@grafana" / "schema" / "package.json").read_text())
    assert installed["version"] == json.loads((CHECK_DIR / "package.json").read_text())[
        "devDependencies"]["@grafana/schema"]
    generated = (tmp_path / "generated" / "llmmeter-cost.ts").read_text()
    assert "export const dashboard: Dashboard = {" in generated
    assert re.search(r'export const panel\d+: Panels\["timeseries"\] = \{', generated)


def first(d: Json, kind: str) -> Json:
    return next(p for p in panels(d) if p["type"] == kind)


MUTATIONS: dict[str, Callable[[Json], Any]] = {
    "unknown_top_level_key": lambda d: d.update(refreshh="1m"),
    "missing_schema_version": lambda d: d.pop("schemaVersion"),
    "grid_width_as_text": lambda d: first(d, "stat")["gridPos"].update(w="4"),
    "unknown_color_mode": lambda d: first(d, "timeseries")["fieldConfig"]["defaults"]["color"].update(
        mode="palette-classicc"),
    "stat_option_out_of_enum": lambda d: first(d, "stat")["options"].update(colorMode="rainbow"),
    "legend_without_placement": lambda d: first(d, "timeseries")["options"]["legend"].pop("placement"),
    "target_without_expr": lambda d: first(d, "bargauge")["targets"][0].pop("expr"),
    "variable_of_unknown_type": lambda d: d["templating"]["list"][1].update(type="dropdown"),
}


def test_type_check_catches_broken_dashboards(tmp_path: Path) -> None:
    """The check has teeth: each of these edits makes tsc fail on that file."""
    cost = json.loads(DASHBOARD_FILES[0].read_text())
    files = []
    for name, mutate in MUTATIONS.items():
        d = copy.deepcopy(cost)
        mutate(d)
        path = tmp_path / "broken" / f"{name}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(d))
        files.append(path)
    r = typecheck(tmp_path, files)
    assert r.returncode != 0
    failed = set(re.findall(r"generated/(\w+)\.ts\(\d+,\d+\): error TS", r.stdout))
    assert failed == set(MUTATIONS), r.stdout


@pytest.mark.parametrize("name", ["datasources/prometheus.yml", "dashboards/llmmeter.yml"])
def test_provisioning_files_parse(name: str) -> None:
    import yaml

    doc = yaml.safe_load((GRAFANA_DIR / "provisioning" / name).read_text())
    assert doc["apiVersion"] == 1
    if name.startswith("datasources"):
        [ds] = doc["datasources"]
        assert (ds["type"], ds["uid"], ds["url"], ds["isDefault"]) == (
            "prometheus", "prometheus", "http://prometheus:9090", True)
        # The dashboards' data source variable starts on it.
        assert all(variables(d)["datasource"]["current"]["value"] == ds["uid"] for d in dashboards())
    else:
        [provider] = doc["providers"]
        assert provider["type"] == "file" and provider["options"]["path"] == "/etc/grafana/dashboards/llmmeter"


# -- what panels promise (tests/observability/promises.py) -----------------------------------
def all_panels() -> list[tuple[str, Json]]:
    return [(f"{d['title']} / {p['title']}", p) for d in dashboards() for p in panels(d)]


def exprs(p: Json) -> str:
    return " ".join(t["expr"] for t in p["targets"])


def test_every_panel_says_what_it_must_equal() -> None:
    """A panel is either held to the ledger's totals (test_live.py) or says why it is not one."""
    from tests.observability.promises import REGISTRY

    titles = [p["title"] for _, p in all_panels()]
    assert len(titles) == len(set(titles))
    assert sorted(set(titles) - set(REGISTRY)) == [], "panels with no entry in promises.py"
    assert sorted(set(REGISTRY) - set(titles)) == [], "entries in promises.py with no panel"


def test_money_is_never_rounded_below_its_size() -> None:
    """$0.004 an hour must not read $0.00: money panels leave decimals to Grafana's auto."""
    for where, p in all_panels():
        if p["fieldConfig"]["defaults"]["unit"] == "currencyUSD":
            assert "decimals" not in p["fieldConfig"]["defaults"], where


def test_spend_is_one_definition_fees_included() -> None:
    """Every spend query reads the cost counter whole (its `type` holds fees too), or names the
    part it shows; nothing adds the fees counter on top (that would count fees twice)."""
    parts = {"Cache writes by lifetime (USD per hour)"}  # only cache writes, as its title says
    for where, p in all_panels():
        e = exprs(p)
        if "llmmeter_cost_usd_total{" in e and p["title"] not in parts:
            assert "type=" not in e.split("llmmeter_cost_usd_total{")[1].split("}")[0], where
        if "llmmeter_cost_usd_total" in e:
            assert "llmmeter_fees_usd_total" not in e, where
    [fees] = [p for _, p in all_panels() if p["title"] == "Fees in range"]
    assert "part of every spend figure" in fees["description"]


def test_panels_say_what_they_compute() -> None:
    by_title = {p["title"]: p for _, p in all_panels()}
    # Savings can be negative (cache writes cost more than they save): no floor at 0.
    for where, p in all_panels():
        if "negative" in p["description"]:
            assert p["fieldConfig"]["defaults"].get("min") is None, where
    # Calls are whole.
    calls = by_title["Calls by upstream in range"]
    assert "round(" in exprs(calls) and calls["fieldConfig"]["defaults"]["decimals"] == 0
    # Error share: 0, not NaN, without calls.
    assert exprs(by_title["Error share"]).endswith("> 0) or vector(0)")
    # Peak ÷ off-peak: every UTC hour counted (missing ones as 0), and 0 when the quiet hours are.
    peak = exprs(by_title["Peak ÷ off-peak"])
    assert all(f'"hour", "{h:02d}"' in peak for h in range(24)) and peak.endswith("> 0) or vector(0)")
    # Every range total counts the first step of a series born in the range.
    for where, p in all_panels():
        for m in re.finditer(r"increase\((\w+)", exprs(p)):
            assert f"min_over_time({m[1]}" in exprs(p), where
