"""The live check: real llmmeter, real Prometheus with the repo's rules, every dashboard query run.

A fake upstream (two of them: an API and a self-hosted server) answers mixed traffic from the
official SDKs — several models, both kimi-k3.1-pro tiers, two tenants with their own keys,
streams, cache writes (5-minute and 1-hour), web search fees, errors, estimated and unpriced
calls — in two waves with a restart of llmmeter between them. Prometheus scrapes llmmeter
every second and evaluates prometheus/rules/*.yml; then every PromQL expression of every
Grafana panel, every template variable query and every rule goes through Prometheus's HTTP
API, and every panel that shows a total is compared with the ledger (promises.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import anthropic
import httpx
import openai
import pytest
from openai import OpenAI

from pricing import PriceBook, default_tables_dir, load_dir
from proxy.settings import Settings
from tests.conftest import DATA
from tests.fake_upstream import FakeUpstream
from tests.observability.promises import REGISTRY, Books, Ledger
from tests.observability.stack import (
    Prometheus,
    PromQLError,
    Query,
    builtins_for,
    dashboards,
    finite_values,
    interpolate,
    panel_queries,
    panels,
    rules,
    variables,
)
from tests.serve import Served
from tests.strict import require

# Two waves of traffic, a restart, and a minute of samples for every counter: more than the
# suite's default 120 s on a busy machine.
pytestmark = pytest.mark.timeout(480)

KEYS = {"search-team": "llmm-live-check-search-team-0001", "agents": "llmm-live-check-agents-0002"}
MSGS: Any = [{"role": "user", "content": "hello there"}]
RANGE_S = 900  # the dashboards' time range: it starts before llmmeter does
ALL = {"tenant": ".*", "model": ".*", "upstream": ".*", "nodes": "2", "budget": ".*"}
ONE = {"tenant": ["search-team"], "model": ["kimi-k3.1-pro"], "upstream": ["moonshot"], "nodes": "2",
       "budget": ["probe"]}


def config(api: FakeUpstream, local: FakeUpstream) -> str:
    tenants = "".join(
        f'\n[[tenant]]\nname = "{t}"\nkey_sha256 = ["{hashlib.sha256(k.encode()).hexdigest()}"]\n'
        + ('monthly_budget_usd = "1000"\n' if t == "search-team" else "")
        for t, k in KEYS.items())
    return f"""
[[upstream]]
name = "selfhosted"
base_url = "{local.base_url}"
models = ["llama-*"]
self_hosted = true

[[upstream]]
name = "moonshot"
base_url = "{api.base_url}"
api_key_env = "MOONSHOT_API_KEY"
models = {json.dumps(API_MODELS)}

[[tag]]
name = "rag-search"

[[tag]]
name = "budget-probe"

[[budget]]
name = "live-monthly"
tenant = "search-team"
limit_usd = "1000"

[[budget]]
name = "probe"
tag = "budget-probe"
limit_usd = "0.05"
mode = "enforce"
alert_at_pct = [10, 50]
{tenants}"""


CALLS_PER_TENANT = 16  # what one drive() sends
# What the API upstream routes: its priced models' series exist at 0 from start (mystery-model-9
# has no price, so it is only routed).
API_MODELS = ["kimi-*", "gpt-test", "claude-sonnet-4*", "text-embedding-test", "mystery-*"]
# The families whose series the range panels read, for the wait below.
COUNTERS = ("cost_usd", "tokens", "requests", "fees_usd", "tagged_cost_usd", "unpriced_requests", "reasoning_tokens",
            "provider_cost_usd", "provider_costed_usd", "budget_overrun_usd")
SPAN_S = 55  # every such series has this many seconds of samples before panels are compared


def usage(**u: object) -> dict[str, str]:
    return {"x-fake-usage": json.dumps(u)}


def drive(proxy: Served, tenant: str, key: str) -> None:
    """One tenant's share of a wave of traffic."""
    oa = OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0,
                default_headers={"X-LLMMeter-Tag": "rag-search" if tenant == "search-team" else "code-agent"})
    an = anthropic.Anthropic(base_url=proxy.url, api_key=key, max_retries=0)
    fast = {"x-fake-service-tier": "priority"}
    # kimi-k3.1-pro, standard and highspeed, plain and streamed, with cache hits.
    oa.chat.completions.create(model="kimi-k3.1-pro", messages=MSGS,
                               extra_headers=usage(prompt=6000, cached=4000, completion=300))
    oa.chat.completions.create(model="kimi-k3.1-pro", messages=MSGS, service_tier="priority",
                               extra_headers={**fast, **usage(prompt=2000, cached=500, completion=150)})
    for extra in ({}, fast):
        tier: Any = {"service_tier": "priority"} if extra else {}
        list(oa.chat.completions.create(model="kimi-k3.1-pro", messages=MSGS, stream=True, **tier,
                                        extra_headers={**extra, "x-fake-delay-ms": "3", "x-fake-chunks": "6"}))
    # Anthropic Messages at the fast speed, streamed, with a cache write.
    list(an.messages.create(model="kimi-k3.1-pro", max_tokens=100, messages=MSGS, stream=True,
                            extra_headers={"x-fake-speed": "fast",
                                           **usage(prompt=3000, cached=1000, cache_write=500, completion=80)}))
    # Other models: OpenAI Responses with reasoning, the self-hosted llama, embeddings.
    list(oa.responses.create(model="gpt-test", input="hello", stream=True,
                             extra_headers=usage(prompt=5000, cached=3000, cache_write=500, completion=700,
                                                 reasoning=300)))
    oa.chat.completions.create(model="llama-test", messages=MSGS, extra_headers=usage(prompt=900, completion=120))
    oa.embeddings.create(model="text-embedding-test", input=["one", "two"])
    # Version-2 billing: 1-hour cache writes and web search calls (the shipped Claude Sonnet 4.5 entry
    # prices both), and a cost the upstream reported itself (OpenRouter's usage.cost).
    an.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=MSGS,
                       extra_headers=usage(prompt=3000, cached=1000, cache_write=500, cache_write_1h=700,
                                           completion=80, web_search=2))
    oa.chat.completions.create(model="kimi-k3.1-pro", messages=MSGS,
                               extra_headers=usage(prompt=1000, completion=50, cost="0.0021"))
    oa.models.list()
    # What goes wrong: upstream 500 and 429, a broken stream, no usage, an unpriced model.
    for status, error in (("500", openai.InternalServerError), ("429", openai.RateLimitError)):
        with pytest.raises(error):
            oa.chat.completions.create(model="kimi-k3.1-pro", messages=MSGS, extra_headers={"x-fake-status": status})
    with pytest.raises(openai.APIError):
        list(oa.chat.completions.create(model="kimi-k3.1-pro", messages=MSGS, stream=True,
                                        extra_headers={"x-fake-reset-after": "3", "x-fake-chunks": "8"}))
    oa.chat.completions.create(model="kimi-k3.1-pro", messages=MSGS, extra_headers={"x-fake-no-usage": "1"})
    oa.chat.completions.create(model="mystery-model-9", messages=MSGS)


def probe_budget(proxy: Served) -> None:
    """The enforced `probe` budget ($0.05): a request whose usage far exceeds its reservation
    (an overrun that spends the budget and crosses both thresholds), then one it refuses."""
    oa = OpenAI(base_url=proxy.base_url, api_key=KEYS["agents"], max_retries=0,
                default_headers={"X-LLMMeter-Tag": "budget-probe"})
    oa.chat.completions.create(model="kimi-k3.1-pro", messages=MSGS, max_tokens=20,
                               extra_headers=usage(prompt=40_000, completion=10))
    with pytest.raises(openai.RateLimitError):  # its worst case, a million output tokens, cannot fit
        oa.chat.completions.create(model="kimi-k3.1-pro", messages=MSGS, max_tokens=1_000_000)


@dataclass
class Restart:
    at: float = 0.0  # wall clock when llmmeter came back, with Prometheus having seen it down
    ids_before: frozenset[str] = frozenset()  # the ledger rows written before it


RESTART = Restart()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Prometheus]]:
    """One stack for the module's tests: traffic and the 15 s month-to-date cache take a while."""
    require(shutil.which("prometheus") is not None, "prometheus is not installed (Debian package prometheus)")
    tmp = tmp_path_factory.mktemp("live")
    prices = tmp / "prices"  # the shipped tables and the suite's test models, as the serve fixture has them
    prices.mkdir()
    for table in [*default_tables_dir().glob("*.toml"), DATA / "prices" / "test-models.toml"]:
        shutil.copy(table, prices)
    (tmp / "llmmeter").mkdir()
    (tmp / "prometheus").mkdir()
    with FakeUpstream() as api, FakeUpstream() as local, Served(
            tmp / "llmmeter", config=config(api, local), env={"MOONSHOT_API_KEY": "sk-live-check-upstream"},
            args=("--prices", str(prices))) as proxy:
        prom = Prometheus(tmp / "prometheus", f"127.0.0.1:{proxy.port}").start()
        try:
            # Prometheus's service discovery takes a few seconds to hand over the target.
            wait_for(prom, 'up{job="llmmeter"} == 1', 30)
            # Two waves, each seen by a scrape, so every counter has a visible increase and a rate;
            # between them llmmeter restarts (its counters start again) and Prometheus sees it down.
            wave_calls = 2 * CALLS_PER_TENANT + 1
            for wave in (1, 2):
                if wave == 2:
                    # Refusals are one ledger record per minute and reason, written as the minute ends.
                    assert len(proxy.rows(expect=wave_calls - 1)) >= wave_calls - 1
                    proxy.stop()
                    wait_for(prom, 'up{job="llmmeter"} == 0', 30)
                    RESTART.ids_before = frozenset(r["id"] for r in proxy.rows())
                    RESTART.at = time.time()
                    proxy.start()
                    wait_for(prom, 'up{job="llmmeter"} == 1', 30)
                for tenant, key in KEYS.items():
                    drive(proxy, tenant, key)
                httpx.post(proxy.base_url + "/chat/completions", json={"model": "kimi-k3.1-pro", "messages": MSGS},
                           headers={"authorization": "Bearer llmm-not-a-key"})
                try:
                    wait_for(prom, f"sum(llmmeter_requests_total) >= {wave_calls}", 30)
                except AssertionError:
                    print("DEBUG wave", wave, prom.query("sum by (code, endpoint, model) (llmmeter_requests_total)"))
                    print(proxy.output()[-3000:])
                    raise
            # Wave 2 repeats wave 1: a series first scraped after its last request in wave 2 shows
            # the count it had before the restart, so Prometheus sees neither a reset nor an
            # increase and its rate is 0 (a time-to-first-token quantile then has no value). One
            # more stream per tenant, after that scrape, gives every streamed series an increase.
            for key in KEYS.values():
                oa = OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0)
                list(oa.chat.completions.create(model="kimi-k3.1-pro", messages=MSGS, stream=True,
                                                extra_headers=usage(prompt=900, completion=30)))
            wait_for(prom, f"sum(llmmeter_requests_total) >= {wave_calls + len(KEYS)}", 30)
            calls = 2 * wave_calls + len(KEYS)
            assert sum(r["request_count"] for r in proxy.rows(expect=calls - 1)) >= calls - 1
            probe_budget(proxy)
            for expr in ("llmmeter_budget_overrun_usd_total > 0", "llmmeter_budget_rejections_total > 0",
                         'llmmeter_budget_alerts_total{threshold="50"} > 0'):
                wait_for(prom, expr, 30)
            # Every recorded series, the month-to-date gauge (it reads the ledger at most every
            # 15 s) and what is computed from it included.
            wait_for(prom, 'llmmeter:month_to_date_cost_usd{tenant="agents"} > 0', 40)
            for record in sorted({r["record"] for _, r in rules() if "record" in r}):
                wait_for(prom, record, 20)
            # increase() stretches a series' growth over its sampled span by up to ~1.6 scrape
            # intervals (1.1 at the end, half of one at the start of a series born with a value):
            # with every series sampled for SPAN_S seconds, that is under 3% (TOLERANCE).
            for family in COUNTERS:
                wait_for(prom, f"min(count_over_time(llmmeter_{family}_total[1m])) >= {SPAN_S}", 120)
            yield proxy, prom
        finally:
            prom.stop()


def wait_for(prom: Prometheus, expr: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if prom.query(expr):
            return
        time.sleep(0.5)
    raise AssertionError(f"{expr} stayed empty for {timeout} s")


def run(prom: Prometheus, q: Query, values: dict[str, Any], now: float) -> list[float]:
    """Runs one panel query as Grafana would (instant, or range over the last minutes); its numbers."""
    expr = interpolate(q.expr, values, builtins_for(q.panel, RANGE_S))
    if q.instant:
        return finite_values(prom.query(expr, now))
    return finite_values(prom.query_range(expr, now - 120, now, 5))


def test_every_panel_query_and_rule_runs_on_live_data(stack: tuple[Served, Prometheus]) -> None:
    _, prom = stack
    now = time.time()

    # Every rule evaluated without error in Prometheus's own rule manager.
    loaded = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
    assert len(loaded) == len(rules())
    assert [(r["name"], r.get("lastError")) for r in loaded if r["health"] != "ok"] == []

    # Every recording rule's expression returns numbers; every alert expression is valid PromQL.
    empty_rules = []
    for file, rule in rules():
        result = prom.query(rule["expr"], now)
        if "record" in rule and not finite_values(result):
            empty_rules.append(f"{file}: {rule['record']}")
    assert empty_rules == []

    # Template variables: label_values(...) as Grafana asks for them.
    for d in dashboards():
        for name, var in variables(d).items():
            if var["type"] != "query":
                continue
            m = re.fullmatch(r"label_values\((\w+), (\w+)\)", var["query"]["query"])
            assert m, var["query"]
            found = prom.api(f"label/{m[2]}/values", **{"match[]": m[1]})
            assert set(found) >= {"tenant": {"search-team", "agents"}, "model": {"kimi-k3.1-pro"},
                                  "upstream": {"moonshot", "selfhosted"},
                                  "budget": {"live-monthly", "probe"}}[name], (name, found)

    # Every panel query, with everything selected and with one tenant, model and upstream.
    queries = panel_queries()
    assert len(queries) >= 60
    for values in (ALL, ONE):
        invalid, empty = [], []
        for q in queries:
            try:
                if not run(prom, q, values, now):
                    empty.append(q.where)
            except PromQLError as e:
                invalid.append(f"{q.where}: {e}")
        assert invalid == []
        # "Nearly all": with everything selected every panel has data; with one tenant, model and
        # upstream, only panels about what that selection did not do may be empty.
        allowed = 0 if values is ALL else len(queries) // 20
        assert len(empty) <= allowed, (values, empty)


def test_dashboards_and_rules_use_only_metrics_llmmeter_exports(stack: tuple[Served, Prometheus]) -> None:
    proxy, _ = stack
    exported = {n for n, _ in proxy.metrics()}
    recorded = {r["record"] for _, r in rules() if "record" in r}
    text = json.dumps([q.expr for q in panel_queries()] + [r["expr"] for _, r in rules()])
    used = set(re.findall(r"\bllmmeter_[a-z_]+", text))
    assert used and used <= exported, used - exported
    assert set(re.findall(r"\bllmmeter:[a-z0-9_:]+", text)) <= recorded


def test_month_to_date_in_prometheus_is_the_ledger(stack: tuple[Served, Prometheus]) -> None:
    proxy, prom = stack
    rows = proxy.rows()
    ledger = {t: sum(Decimal(r["cost_units"] or 0) for r in rows if r["tenant"] == t) / 10**10 for t in KEYS}
    assert all(v > 0 for v in ledger.values())
    for tenant, usd in ledger.items():
        [sample] = prom.query(f'llmmeter:month_to_date_cost_usd{{tenant="{tenant}"}}')
        assert Decimal(sample["value"][1]).quantize(Decimal("0.000001")) == usd.quantize(Decimal("0.000001"))
    # Both tiers reached the spend-rate rule, and the budget panel divides by the configured budget.
    tiers = {s["metric"]["tier"] for s in prom.query('llmmeter:cost_usd_per_hour:rate5m{model="kimi-k3.1-pro"}')}
    assert tiers == {"standard", "highspeed"}
    used = {s["metric"]["tenant"]: float(s["value"][1]) for s in prom.query(
        "llmmeter:month_to_date_cost_usd / on (tenant) (max by (tenant) (llmmeter_monthly_budget_usd) > 0)")}
    assert set(used) == {"search-team"}
    # The live-monthly [[budget]] (search-team, this UTC month): its spent gauge is the ledger's too.
    want = float(ledger["search-team"])
    wait_for(prom, f'abs(max(llmmeter_budget_spent_usd{{budget="live-monthly"}}) - {want}) < 1e-9', 20)
    [limit] = prom.query('llmmeter_budget_limit_usd{budget="live-monthly"}')
    assert float(limit["value"][1]) == 1000
    assert used["search-team"] == pytest.approx(float(ledger["search-team"]) / 1000)


# -- the dashboards against the ledger (promises.py) -----------------------------------------
TOLERANCE = Decimal("0.03")  # increase()'s extrapolation, with SPAN_S seconds of samples (see the fixture)


def legend(fmt: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m[1], ""), fmt)


def panel_numbers(prom: Prometheus, panel: dict[str, Any], values: dict[str, Any], range_s: int,
                  now: float) -> dict[str, Decimal]:
    """The panel's instant numbers, by legend, as Grafana shows them."""
    out: dict[str, Decimal] = {}
    for t in panel["targets"]:
        expr = interpolate(t["expr"], values, builtins_for(panel, range_s))
        for s in prom.query(expr, now):
            out[legend(t["legendFormat"], s["metric"])] = Decimal(s["value"][1])  # NaN and ±Inf kept
    return out


def books(proxy: Served, rows: list[dict[str, Any]], range_s: int, now: float) -> Books:
    prices = proxy.tmp.parent / "prices"
    book = PriceBook(load_dir(prices), {})
    return Books(rows=rows, book=book, tenants=frozenset({"default", *KEYS}),
                 tags=frozenset({"rag-search", "budget-probe"}), upstreams=frozenset({"moonshot", "selfhosted"}),
                 range_s=range_s, now=datetime.fromtimestamp(now, UTC),
                 selfhost_usd=Settings().selfhost.monthly_cost_usd(),
                 budgets=lambda r: ["probe"] if r["tag"] == "budget-probe" else [])


def test_every_total_on_the_dashboards_is_the_ledgers(stack: tuple[Served, Prometheus]) -> None:
    """Money, tokens and calls in range, fees included, against the ledger's rows, within
    increase()'s extrapolation; over a range that spans the restart (and, for calls, which
    llmmeter cannot create in advance, one that starts after it: docs/metrics.md)."""
    proxy, prom = stack
    now = time.time()
    rows = proxy.rows()
    assert any(r["fee_units"] for r in rows) and any(r["cache_write_1h_tokens"] for r in rows)
    assert any(r["cost_units"] is None for r in rows) and any(r["usage_source"] == "estimated" for r in rows)
    after = [r for r in rows if r["id"] not in RESTART.ids_before]
    assert RESTART.ids_before and after
    since = int(now - RESTART.at)
    wrong = []
    for d in dashboards():
        for p in panels(d):
            promise = REGISTRY[p["title"]]
            if not isinstance(promise, Ledger):
                continue
            range_s = since if promise.since_restart else RANGE_S
            expect = promise.expect(books(proxy, after if promise.since_restart else rows, range_s, now))
            got = panel_numbers(prom, p, ALL, range_s, now)
            keys = set(expect) | {k for k, v in got.items() if v}
            if "*" in expect:  # the parts are not in the ledger apart: their sum and the named ones are
                got["*"], keys = sum(got.values(), Decimal(0)), set(expect)
            for key in sorted(keys):
                want, have = expect.get(key, Decimal(0)), got.get(key, Decimal(0))
                if not have.is_finite() or abs(have - want) > TOLERANCE * abs(want) + Decimal("1e-9"):
                    wrong.append(f"{d['title']} / {p['title']} [{key}]: dashboard {have:.6g}, ledger {want:.6g}")
    assert wrong == []


def test_error_share_is_zero_without_calls(stack: tuple[Served, Prometheus]) -> None:
    _, prom = stack
    [panel] = [p for d in dashboards() for p in panels(d) if p["title"] == "Error share"]
    nobody = {**ALL, "tenant": ["nobody"]}
    assert panel_numbers(prom, panel, nobody, RANGE_S, time.time()) == {"errors": Decimal(0)}


def test_peak_to_offpeak_is_the_reports(stack: tuple[Served, Prometheus]) -> None:
    """Hours without tokens count as 0, and 0 quiet hours make the ratio 0: as the report says."""
    proxy, prom = stack
    now = time.time()
    month = datetime.fromtimestamp(now, UTC).strftime("%Y-%m")
    r = proxy.cli("report", "--month", month, "--format", "json", "--db", proxy.db_url,
                  "--config", str(proxy.tmp / "llmmeter.toml"))
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)["peak_to_offpeak_ratio"]
    [panel] = [p for d in dashboards() for p in panels(d) if p["title"] == "Peak ÷ off-peak"]
    assert panel_numbers(prom, panel, ALL, RANGE_S, now) == {"peak/off-peak": pytest.approx(Decimal(str(report)))}
    [profile] = [p for d in dashboards() for p in panels(d) if p["title"] == "Hour-of-day profile (UTC)"]
    hours = panel_numbers(prom, profile, ALL, RANGE_S, now)
    assert sorted(hours) == [f"{h:02d}" for h in range(24)]


def test_estimated_share_counts_calls_after_the_restart(stack: tuple[Served, Prometheus]) -> None:
    _, prom = stack
    [s] = prom.query('llmmeter:estimated_usage:ratio_rate30m{model="kimi-k3.1-pro"}')
    assert float(s["value"][1]) > 0


def test_cost_curve_is_the_reports(stack: tuple[Served, Prometheus]) -> None:
    """The cost dashboard's curve is the report's cost_curve for this UTC month so far: every point's
    utilisation and cost, the API's line, the measured utilisation marked, and the stats beside it.
    llmmeter reads the ledger for it at most once a minute, and the month's minutes grow while the
    test runs, so the figures agree to 0.1% once the gauges are newer than the last record."""
    proxy, prom = stack
    month = datetime.now(UTC).strftime("%Y-%m")
    r = proxy.cli("report", "--month", month, "--format", "json", "--db", proxy.db_url,
                  "--config", str(proxy.tmp / "llmmeter.toml"))
    assert r.returncode == 0, r.stderr
    curve = json.loads(r.stdout)["cost_curve"]
    assert len(curve["points"]) == 20 and curve["self_hosted_usd_per_mtok_at_measured"] is not None
    api = Decimal(curve["api_usd_per_mtok"])
    want: dict[str, Decimal] = {}
    for p in curve["points"]:
        name = f"u{round(p['utilisation'] * 100):02d}"
        want |= {f"utilisation {name}": Decimal(str(p["utilisation"])),
                 f"self-hosted {name}": Decimal(p["self_hosted_usd_per_mtok"]), f"API {name}": api}
    measured = Decimal(curve["self_hosted_usd_per_mtok_at_measured"])
    want |= {"self-hosted measured": measured, "API measured": api, "measured utilisation measured": measured}
    if curve["breakeven_utilisation"] is not None and curve["breakeven_utilisation"] <= 1:
        want |= {"self-hosted breakeven": api, "API breakeven": api}
    by_title = {p["title"]: p for d in dashboards() for p in panels(d)}
    stats = {"API per million tokens": {"API": api},
             "Self-hosted deployment per month": {f"{curve['nodes']} x {curve['node']}":
                                                  Decimal(curve["monthly_cost_usd"])}}

    def wrong() -> list[str]:
        now = time.time()
        got = panel_numbers(prom, by_title["Cost per million tokens by utilisation"], ALL, RANGE_S, now)
        # The report's JSON rounds utilisations to 6 places: the measured and break-even ones are compared there.
        off = []
        for key, v in (("utilisation measured", curve["measured_utilisation"]),
                       ("utilisation breakeven", curve["breakeven_utilisation"])):
            if key in got and (v is None or abs(got.pop(key) - Decimal(str(v))) > Decimal("1e-6")):
                off.append(key)
        off += [k for k in sorted(set(got) | set(want)) if k not in got or k not in want
                or abs(got[k] - want[k]) > Decimal("0.001") * abs(want[k]) + Decimal("1e-9")]
        for title, expect in stats.items():
            have = panel_numbers(prom, by_title[title], ALL, RANGE_S, now)
            off += [f"{title} {k}" for k in set(have) | set(expect) if k not in have or k not in expect
                    or abs(have[k] - expect[k]) > Decimal("0.001") * abs(expect[k])]
        [u] = panel_numbers(prom, by_title["Measured utilisation"], ALL, RANGE_S, now).values()
        if abs(u - Decimal(str(curve["measured_utilisation"]))) > Decimal("1e-6"):
            off.append("Measured utilisation")
        even = Decimal(str(curve["breakeven_utilisation"]))  # 6 places, whatever its size
        [b] = panel_numbers(prom, by_title["Break-even utilisation"], ALL, RANGE_S, now).values()
        if abs(b - even) > Decimal("1e-6") + Decimal("0.001") * even:
            off.append("Break-even utilisation")
        return off

    deadline = time.monotonic() + 150  # the gauges' minute, a scrape, and a margin for a busy machine
    while (found := wrong()) and time.monotonic() < deadline:
        time.sleep(2)
    assert found == []
