"""The repo's observability files as tests read them, and a real Prometheus to run them on."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.serve import free_port, wait_ready

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = REPO / "prometheus"
RULE_FILES = sorted((PROMETHEUS_DIR / "rules").glob("*.yml"))
GRAFANA_DIR = REPO / "grafana"
DASHBOARD_FILES = sorted((GRAFANA_DIR / "dashboards").glob("*.json"))
CHECK_DIR = GRAFANA_DIR / "check"
TSC = CHECK_DIR / "node_modules" / ".bin" / "tsc"

Json = dict[str, Any]


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def dashboards() -> list[Json]:
    import json

    return [json.loads(p.read_text()) for p in DASHBOARD_FILES]


def panels(dashboard: Json) -> Iterator[Json]:
    """Every panel but rows, rows' collapsed children included."""
    for p in dashboard["panels"]:
        if p["type"] == "row":
            yield from p.get("panels", [])
        else:
            yield p


@dataclass(frozen=True)
class Query:
    where: str      # "dashboard / panel [refId]" or "rule file: name", for failure messages
    expr: str
    instant: bool
    panel: Json | None = None


def panel_queries() -> list[Query]:
    out = []
    for d in dashboards():
        for p in panels(d):
            for t in p.get("targets", []):
                out.append(Query(f"{d['title']} / {p['title']} [{t['refId']}]", t["expr"],
                                 bool(t.get("instant")), p))
    return out


def rules() -> list[tuple[str, Json]]:
    """(file name, rule) for every recording and alert rule."""
    return [(f.name, r) for f in RULE_FILES for g in load_yaml(f)["groups"] for r in g["rules"]]


def variables(dashboard: Json) -> dict[str, Json]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}


# -- Grafana's interpolation, as its Prometheus data source does it ---------------------------
_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


def prometheus_regex_escape(value: str) -> str:
    """Grafana escapes regex characters of a variable's value, then PromQL-escapes the backslashes."""
    return re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", value)


def interpolate(expr: str, values: Mapping[str, str | list[str]], builtins: Mapping[str, str]) -> str:
    """Substitutes template variables; a multi-value selection becomes (a|b); a left-over `$` fails."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name in builtins:
            return builtins[name]
        if name not in values:
            raise KeyError(f"no value for ${name} in {expr!r}")
        v = values[name]
        if isinstance(v, str):
            return v
        escaped = [prometheus_regex_escape(x) for x in v]
        return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"

    return _VAR.sub(one, expr)


def builtins_for(panel: Json | None, range_s: int, scrape_s: int = 1) -> dict[str, str]:
    """$__interval and $__rate_interval as Grafana would set them for this panel."""
    interval = (panel or {}).get("interval") or f"{max(scrape_s, 1)}s"
    interval_s = _seconds(interval)
    rate_s = max(interval_s + scrape_s, 4 * scrape_s, 60)  # at least a minute: traffic came in bursts
    return {"__range": f"{range_s}s", "__range_s": str(range_s), "__interval": interval,
            "__rate_interval": f"{rate_s}s"}


def _seconds(d: str) -> int:
    n, unit = int(d[:-1]), d[-1]
    return n * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]


# -- a real Prometheus ------------------------------------------------------------------------
class Prometheus:
    """`prometheus` on a free 127.0.0.1 port with the repo's rules, scraping `target` every second."""

    def __init__(self, tmp: Path, target: str, scrape_s: int = 1) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = load_yaml(PROMETHEUS_DIR / "prometheus.yml")
        config["global"].update(scrape_interval=f"{scrape_s}s", evaluation_interval=f"{scrape_s}s")
        config["rule_files"] = [str(f) for f in RULE_FILES]
        [job] = [j for j in config["scrape_configs"] if j["job_name"] == "llmmeter"]
        job["static_configs"] = [{"targets": [target]}]
        self.config = tmp / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(config))
        self.log = tmp / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30) -> Prometheus:
        cmd = [shutil.which("prometheus") or "prometheus", f"--config.file={self.config}",
               f"--storage.tsdb.path={self.tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{self.port}",
               "--log.level=warn"]
        self.proc = subprocess.Popen(cmd, stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
                                     env={**os.environ, "GOMAXPROCS": "1"})
        wait_ready(self.proc, self.url + "/-/ready", "prometheus", self.log.read_text, timeout)
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path>; returns `data`, raises with Prometheus's own error text."""
        r = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=30)
        body = r.json()
        if body.get("status") != "success":
            raise PromQLError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[Json]:
        data = self.api("query", query=expr, time=at if at is not None else time.time())
        return _as_list(data)

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Json]:
        return _as_list(self.api("query_range", query=expr, start=start, end=end, step=step))


class PromQLError(Exception):
    pass


def _as_list(data: Json) -> list[Json]:
    result = data["result"]
    if data["resultType"] == "scalar":
        return [{"metric": {}, "value": result}]
    return list(result)


def finite_values(result: list[Json]) -> list[float]:
    """The numbers in an instant or range result, NaN and infinities left out."""
    out = []
    for series in result:
        points = series.get("values") or ([series["value"]] if "value" in series else [])
        for _, v in points:
            f = float(v)
            if f == f and f not in (float("inf"), float("-inf")):
                out.append(f)
    return out
