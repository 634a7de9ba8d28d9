"""Configuration: raw TOML -> validated, typed settings (unknown keys are errors).

Precedence is flag > environment > config file > default (SPEC "Settings"). Loading is
two steps, as in TensorZero: `tomllib` gives raw tables, `_build` checks every key and
turns them into the frozen dataclasses below, naming the file and line of each problem.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pricing.toml_lines import header_lines, key_line
from proxy.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Upstream:
    name: str
    base_url: str
    anthropic_base_url: str | None = None
    api_key_env: str | None = None
    models: tuple[str, ...] = ()
    inject_include_usage: bool = True
    self_hosted: bool = False
    max_connections: int = 100  # per worker process; more requests wait in order
    idle_s: float = 30.0  # an idle pooled connection is closed after this
    ca_file: Path | None = None  # PEM bundle instead of the system store
    client_cert: Path | None = None  # mutual TLS
    client_key: Path | None = None
    proxy: str | None = None  # egress proxy URL; "none" disables; None: HTTPS_PROXY/HTTP_PROXY/NO_PROXY
    # "from_total": total_tokens beyond prompt + completion is billed output (xAI, Gemini);
    # "flag": such a mismatch is only flagged (SPEC "Usage extraction").
    hidden_output: str = "flag"
    # Tiers (lower-case) this upstream serves when a request asks for them, though its answers do
    # not say so; any other tier a request names is believed only if the answer confirms it.
    honoured_tiers: tuple[str, ...] = ()
    # The resolved key; filled by `serve` only, never printed (repr=False).
    api_key: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    key_sha256: tuple[str, ...] = ()
    monthly_budget_usd: Decimal = Decimal(0)


@dataclass(frozen=True, slots=True)
class Workloads:
    medium: int = 4096
    long: int = 32768
    very_long: int = 131072

    def classify(self, input_side_tokens: int) -> str:
        if input_side_tokens >= self.very_long:
            return "very_long"
        if input_side_tokens >= self.long:
            return "long"
        if input_side_tokens >= self.medium:
            return "medium"
        return "short"


@dataclass(frozen=True, slots=True)
class Estimate:
    encoding: str = "o200k_base"
    per_model: tuple[tuple[tuple[str, ...], str], ...] = ()
    engine: str = "tiktoken"  # tiktoken | compact (proxy/metering/estimate/)


@dataclass(frozen=True, slots=True)
class Budget:
    """A `[[budget]]` (SPEC "Budgets (enforced)"): a cap on the priced cost of the requests it
    matches in each calendar day or month of its time zone."""

    name: str
    limit_usd: Decimal
    tenant: str | None = None  # None: every tenant
    tag: str | None = None  # None: every tag (and untagged requests)
    period: str = "month"  # "day" | "month"
    tz: str = "UTC"
    mode: str = "alert"  # "alert" (gauges and alerts only) | "enforce"
    alert_at_pct: tuple[int, ...] = (50, 80, 100)
    allow_unpriced: bool = False  # enforce: admit models with no price (their cost cannot be bounded)

    @property
    def enforced(self) -> bool:
        return self.mode == "enforce"


@dataclass(frozen=True, slots=True)
class ModelLimit:
    """`[[model_limit]]`: a model's longest answer, for the reservation of a request without a max."""

    match: tuple[str, ...]
    max_output: int


@dataclass(frozen=True, slots=True)
class ReconcileSource:
    """Where `llmmeter reconcile --against openai|anthropic` reads the provider's own usage and
    cost (SPEC "Reconciliation"). The admin key is read from the environment when the command
    runs, never stored or printed."""

    admin_key_env: str
    base_url: str
    project_ids: tuple[str, ...] = ()  # OpenAI: narrow usage and costs to these projects
    api_key_ids: tuple[str, ...] = ()  # OpenAI and Anthropic: narrow usage to these API keys
    workspace_ids: tuple[str, ...] = ()  # Anthropic: narrow usage and cost to these workspaces
    upstreams: tuple[str, ...] = ()  # the ledger side: these upstreams' records (none: every upstream)


RECONCILE_DEFAULTS = {
    "openai": ReconcileSource("OPENAI_ADMIN_KEY", "https://api.openai.com/v1"),
    "anthropic": ReconcileSource("ANTHROPIC_ADMIN_KEY", "https://api.anthropic.com/v1"),
}


# SPEC "Self-hosting, version 2": the figures of a [[selfhost.node]], each with `<figure>_source`.
NODE_FIGURES = ("accelerators", "capex_usd", "rent_usd_per_month", "power_kw", "kv_cache_tokens",
                "prefill_tokens_per_s", "decode_tokens_per_s")
_NODE_KEYS = {"name", *NODE_FIGURES, *(f"{f}_source" for f in NODE_FIGURES)}


@dataclass(frozen=True, slots=True)
class NodeProfile:
    """One kind of node a team could run the model on (a `[[selfhost.node]]`), every figure with
    where it came from: a vendor claim, a measurement or an assumption."""

    name: str
    accelerators: str
    kv_cache_tokens: int  # KV cache the node holds, in tokens
    prefill_tokens_per_s: int  # input-side tokens it processes per second, all requests together
    decode_tokens_per_s: int  # output tokens it generates per second, all requests together
    capex_usd: Decimal | None = None
    rent_usd_per_month: Decimal | None = None  # replaces amortised capex when set
    power_kw: Decimal | None = None
    sources: tuple[tuple[str, str], ...] = ()  # (figure, source) for every figure set

    def source(self, figure: str) -> str:
        return dict(self.sources).get(figure, "")


@dataclass(frozen=True, slots=True)
class SelfHost:
    nodes: int = 2
    node_capex_usd: Decimal = Decimal("600000")
    amortization_months: int = 36
    power_kw_per_node: Decimal = Decimal("15")
    usd_per_kwh: Decimal = Decimal("0.12")
    ops_usd_per_month: Decimal = Decimal("20000")
    node_prefill_tokens_per_s: int = 50000
    node_decode_tokens_per_s: int = 17678
    # The configured [[selfhost.node]] tables; empty: the shipped profiles (proxy/report/nodes.py).
    node_profiles: tuple[NodeProfile, ...] = ()
    # The configured [[selfhost.equivalent]] tables: (model, provider_id:model entries); empty: the
    # shipped ones (proxy/report/alternatives.py).
    equivalents: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Which values the config file set, so reports can say "from llmmeter.toml".
    overridden: frozenset[str] = frozenset()

    def monthly_cost_usd(self) -> Decimal:
        """SPEC: nodes x capex / months + nodes x kW x 730 h x $/kWh + ops."""
        capex = self.nodes * self.node_capex_usd / self.amortization_months
        power = self.nodes * self.power_kw_per_node * 730 * self.usd_per_kwh
        return capex + power + self.ops_usd_per_month


@dataclass(frozen=True, slots=True)
class Otel:
    """OTLP/HTTP export of one span per metered call (docs/otel.md); off while `endpoint` is None."""

    endpoint: str | None = None  # the collector's base URL; /v1/traces is appended
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # may carry a collector's key
    service_name: str = "llmmeter"
    sample_ratio: float = 1.0
    queue_size: int = 2048  # spans held for export; past it the oldest are dropped and counted

    @property
    def enabled(self) -> bool:
        return self.endpoint is not None


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    max_body_mb: int = 32
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 600.0
    head_timeout_s: float = 30.0
    body_timeout_s: float = 60.0
    idle_timeout_s: float = 75.0
    send_timeout_s: float = 120.0
    max_pipelined_requests: int = 1  # requests a connection may have unanswered; more wait in the kernel
    max_decompressed_mb: int = 64
    public_url: str | None = None  # the address clients use, where llmmeter must name itself
    max_connections_per_tenant: int | None = None  # None: max_connections ÷ 2 when tenants are configured
    metrics_token: str | None = field(default=None, repr=False)
    metrics_bind: tuple[str, int] | None = None  # (host, port): /metrics on a listener of its own
    ledger_url: str = "sqlite:///data/llmmeter.db"
    journal_dir: Path | None = None
    fsync: bool = False
    keep_requests_months: int | None = None  # None: keep every month's per-request rows
    prices_dir: Path | None = None  # None: the shipped pricing/tables
    upstreams: tuple[Upstream, ...] = ()
    tenants: tuple[Tenant, ...] = ()
    tags: tuple[str, ...] = ()
    workloads: Workloads = Workloads()
    tier_aliases: tuple[tuple[str, str], ...] = ()
    estimate: Estimate = Estimate()
    selfhost: SelfHost = SelfHost()
    monthly_budget_usd: Decimal = Decimal(0)
    budgets: tuple[Budget, ...] = ()
    model_limits: tuple[ModelLimit, ...] = ()
    reconcile: Mapping[str, ReconcileSource] = field(default_factory=lambda: dict(RECONCILE_DEFAULTS))
    otel: Otel = Otel()
    config_file: Path | None = None

    @property
    def keys_required(self) -> bool:
        return any(t.key_sha256 for t in self.tenants)

    def tenant_share(self, upstream: Upstream) -> int | None:
        """How many of `upstream`'s connections one tenant may hold at once; None: no cap (no
        tenants configured, so there is no other tenant to keep a share for)."""
        if not self.tenants:
            return None
        if self.max_connections_per_tenant is not None:
            return min(self.max_connections_per_tenant, upstream.max_connections)
        return max(1, upstream.max_connections // 2)


_SCHEMA: dict[str, set[str]] = {
    "server": {"host", "port", "max_body_mb", "connect_timeout_s", "read_timeout_s",
               "metrics_token", "workers", "head_timeout_s", "body_timeout_s", "idle_timeout_s",
               "send_timeout_s", "max_decompressed_mb", "public_url", "max_pipelined_requests",
               "max_connections_per_tenant", "metrics_bind"},
    "ledger": {"url", "journal_dir", "fsync", "keep_requests_months"},
    "pricing": {"dir"},
    "workloads": {"medium", "long", "very_long"},
    "estimate": {"encoding", "model", "engine"},
    "selfhost": {"nodes", "node_capex_usd", "amortization_months", "power_kw_per_node",
                 "usd_per_kwh", "ops_usd_per_month", "node_prefill_tokens_per_s",
                 "node_decode_tokens_per_s", "node", "equivalent"},
    "budget": {"monthly_usd"},
    "reconcile": {"openai", "anthropic"},
    "otel": {"endpoint", "headers", "service_name", "sample_ratio", "queue_size"},
}
_RECONCILE_KEYS = {"admin_key_env", "base_url", "project_ids", "api_key_ids", "workspace_ids", "upstreams"}
_ARRAYS: dict[str, set[str]] = {
    "upstream": {"name", "base_url", "anthropic_base_url", "api_key_env", "models",
                 "inject_include_usage", "self_hosted", "max_connections", "idle_s", "ca_file",
                 "client_cert", "client_key", "proxy", "hidden_output", "honoured_tiers"},
    "tenant": {"name", "key_sha256", "monthly_budget_usd"},
    "tag": {"name"},
    "tier_alias": {"from", "to"},
    "model_limit": {"match", "max_output"},
}
_BUDGET_KEYS = {"name", "tenant", "tag", "period", "tz", "limit_usd", "mode", "alert_at_pct", "allow_unpriced"}
BUDGET_PERIODS = ("day", "month")
MAX_BUDGET_USD = Decimal(10**7)  # 10^17 units: below any reservation cap, a lease amount one BIGINT
BUDGET_MODES = ("alert", "enforce")
# Flags (by their override name) and the variables that stand for the same setting.
_ENV: dict[str, str] = {"host": "LLMMETER_HOST", "port": "LLMMETER_PORT", "workers": "LLMMETER_WORKERS",
                        "metrics_token": "LLMMETER_METRICS_TOKEN",
                        "metrics_bind": "LLMMETER_METRICS_BIND", "db": "LLMMETER_DB",
                        "prices": "LLMMETER_PRICES", "upstream": "LLMMETER_UPSTREAM"}
_TARGETS: dict[str, tuple[str, str]] = {"host": ("server", "host"), "port": ("server", "port"),
                                        "workers": ("server", "workers"),
                                        "metrics_token": ("server", "metrics_token"),
                                        "metrics_bind": ("server", "metrics_bind"), "db": ("ledger", "url"),
                                        "prices": ("pricing", "dir")}
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}\Z")  # \Z: "$" would let a final newline in
# Metric label values llmmeter itself uses: the global budget gauge, the overflow of
# unconfigured values, requests without a valid key. A tenant of that name would merge with them.
RESERVED_TENANTS = frozenset({"all", "other", "unauthenticated"})
RESERVED_TAGS = frozenset({"other"})  # untagged and unknown tags are counted as "other"
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_TOKEN_RE = re.compile(r"[!-~]+\Z")  # what a client can put in an Authorization header unchanged
MAX_USD = 10**12
_HEX64_RE = re.compile(r"[0-9a-f]{64}\Z")
_LABEL_RE = re.compile(r"[A-Za-z0-9_.:/\-]{1,64}\Z")  # what proxy/metering/meter.py clean_tag leaves


class _Source:
    """The config text, for turning a (table, key) into `file:line`."""

    def __init__(self, path: Path | None, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def where(self, table: str | None, key: str | None = None, index: int = 0) -> str:
        name = str(self.path) if self.path else "<config>"
        line = self._find(table, key, index)
        return f"{name}:{line}" if line else name

    def where_top(self, name: str) -> str:
        """A top-level key is either a `[name]` header or a `name = ...` line."""
        found = self.where(name)
        return found if found != self.where(None) else self.where(None, name)

    def _find(self, table: str | None, key: str | None, index: int) -> int:
        start = 0
        if table is not None:
            headers = header_lines(self.lines, table)
            if index >= len(headers):
                return 0
            start = headers[index]
            if key is None:
                return start + 1
        if key is None:
            return 0
        found = key_line(self.lines, start, len(self.lines), key, stop_at_table=table is not None)
        return found or (start + 1 if table is not None else 0)


def load(path: Path | None, env: Mapping[str, str] | None = None,
         overrides: Mapping[str, Any] | None = None) -> Settings:
    """Settings from the file (if any), then environment, then explicit flag overrides.

    Variables and flags are written into the file's raw tables before any check, so the
    three sources pass the same checks; `origins` makes a rejection name the one that won."""
    env = os.environ if env is None else env
    raw, src = _read(path) if path is not None else ({}, _Source(None, ""))
    given: dict[str, tuple[str, object]] = {}  # override name -> (where it came from, value)
    for name, var in _ENV.items():
        if env.get(var):  # an empty variable counts as unset, as shells export them
            given[name] = (f"variable {var}", env[var])
    for name, value in (overrides or {}).items():
        if name not in _ENV:
            raise ConfigError(f"unknown override {name!r}")
        if value is not None:
            given[name] = (f"flag --{name.replace('_', '-')}", value)
    origins: dict[tuple[str, str | None], str] = {}
    _layer(raw, given, origins)
    settings = _build(raw, src, origins)
    key = env.get("LLMMETER_UPSTREAM_API_KEY") or None
    ups = settings.upstreams
    # The key of the --upstream shorthand, or of a lone upstream that names no api_key_env.
    if key is not None and len(ups) == 1 and ups[0].api_key_env is None:
        settings = replace(settings, upstreams=(replace(ups[0], api_key=key),))
    return settings


def _read(path: Path) -> tuple[dict[str, Any], _Source]:
    """The file's raw tables; whatever is wrong with its bytes is a ConfigError naming it."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte {e.start} is {data[e.start]:#04x}): "
                          "a config file is TOML") from None
    try:
        return tomllib.loads(text), _Source(path, text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"at line (\d+)", str(e))
        raise ConfigError(f"{path}:{m.group(1) if m else 1}: not valid TOML: {e}") from None
    except RecursionError:  # tomllib recurses once per nested array or table
        raise ConfigError(f"{path}: arrays or tables nested too deeply to be a config file") from None


def _layer(raw: dict[str, Any], given: Mapping[str, tuple[str, object]],
           origins: dict[tuple[str, str | None], str]) -> None:
    for name, (origin, value) in given.items():
        if name == "upstream":
            # The shorthand replaces every [[upstream]] with one default upstream (SPEC).
            raw["upstream"] = [{"name": "default", "base_url": _text(value)}]
            origins[("upstream", None)] = origin
            continue
        table, key = _TARGETS[name]
        section = raw.setdefault(table, {})
        if isinstance(section, dict):  # otherwise _build reports the file's `table = value`
            section[key] = _whole(value) if key in ("port", "workers") else _text(value)
            origins[(table, key)] = origin


def _text(value: object) -> object:
    return str(value) if isinstance(value, Path) else value


def _whole(value: object) -> object:
    """A variable's text as a number if it is one; otherwise as given, for the checker to refuse."""
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return value
    return value


def default_config_path(env: Mapping[str, str] | None = None) -> Path | None:
    env = os.environ if env is None else env
    if env.get("LLMMETER_CONFIG"):
        return Path(env["LLMMETER_CONFIG"])
    local = Path("llmmeter.toml")
    return local if local.is_file() else None


def resolve_api_keys(settings: Settings, env: Mapping[str, str] | None = None) -> Settings:
    """Read each upstream's api_key_env; refuse to start when one is named and unset.

    A key pasted from a file or `echo` often ends in a newline: surrounding whitespace is
    trimmed; a control character left inside would end the header line, so it is refused."""
    env = os.environ if env is None else env
    where = settings.config_file or "<config>"
    resolved = []
    for up in settings.upstreams:
        source = up.api_key_env or "LLMMETER_UPSTREAM_API_KEY"
        value = up.api_key if up.api_key is not None else env.get(up.api_key_env or "") if up.api_key_env else None
        if value is None and up.api_key_env is None:
            resolved.append(up)
            continue
        value = (value or "").strip()
        if any(ch < " " or ch == "\x7f" for ch in value):
            raise ConfigError(f"{where}: the key in {source} (upstream {up.name!r}) contains a control "
                              "character or line break; it cannot be sent in a header")
        if not value:
            raise ConfigError(f"{where}: upstream {up.name!r} names api_key_env = {source!r}, "
                              "but that environment variable is not set")
        resolved.append(replace(up, api_key=value))
    return replace(settings, upstreams=tuple(resolved))


def _build(raw: dict[str, Any], src: _Source, origins: Mapping[tuple[str, str | None], str]) -> Settings:
    errors: list[str] = []
    for key in raw:
        if key not in _SCHEMA and key not in _ARRAYS:
            errors.append(f"{src.where_top(key)}: unknown section or key {key!r} (known: "
                          f"{', '.join(sorted([*_SCHEMA, *_ARRAYS]))})")
    tables: dict[str, dict[str, Any]] = {}
    budget_array: list[dict[str, Any]] = []
    if isinstance(raw.get("budget"), list):  # [[budget]]: TOML cannot also hold the legacy [budget]
        budget_array = raw["budget"]
        raw = {k: v for k, v in raw.items() if k != "budget"}
        for i, item in enumerate(budget_array):
            if not isinstance(item, dict):
                errors.append(f"{src.where(None, 'budget')}: use [[budget]] tables for 'budget'")
                budget_array = []
                break
            for key in item:
                if key not in _BUDGET_KEYS:
                    errors.append(f"{src.where('budget', key, i)}: unknown key {key!r} in [[budget]] "
                                  f"(known: {', '.join(sorted(_BUDGET_KEYS))})")
    for name, allowed in _SCHEMA.items():
        value = raw.get(name, {})
        if not isinstance(value, dict):
            errors.append(f"{src.where(None, name)}: [{name}] must be a table")
            value = {}
        for key in value:
            if key not in allowed:
                errors.append(f"{src.where(name, key)}: unknown key {key!r} in [{name}] "
                              f"(known: {', '.join(sorted(allowed))})")
        tables[name] = value
    arrays: dict[str, list[dict[str, Any]]] = {}
    for name, allowed in _ARRAYS.items():
        value = raw.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            errors.append(f"{src.where(None, name)}: use [[{name}]] tables for {name!r}")
            value = []
        for i, item in enumerate(value):
            for key in item:
                if key not in allowed:
                    errors.append(f"{src.where(name, key, i)}: unknown key {key!r} in "
                                  f"[[{name}]] (known: {', '.join(sorted(allowed))})")
        arrays[name] = value
    if errors:
        raise ConfigError("\n".join(errors))

    c = _Checker(src, errors, origins)
    server, ledger, pricing = tables["server"], tables["ledger"], tables["pricing"]
    tenants = _tenants(c, arrays["tenant"])
    s = Settings(
        host=c.str_("server", server, "host", "127.0.0.1"),
        port=c.int_("server", server, "port", 8080, lo=1, hi=65535),
        workers=c.int_("server", server, "workers", 1, lo=1, hi=256),
        max_body_mb=c.int_("server", server, "max_body_mb", 32, lo=1, hi=4096),
        connect_timeout_s=c.num("server", server, "connect_timeout_s", 10.0),
        read_timeout_s=c.num("server", server, "read_timeout_s", 600.0),
        head_timeout_s=c.num("server", server, "head_timeout_s", 30.0),
        body_timeout_s=c.num("server", server, "body_timeout_s", 60.0),
        idle_timeout_s=c.num("server", server, "idle_timeout_s", 75.0),
        send_timeout_s=c.num("server", server, "send_timeout_s", 120.0),
        max_pipelined_requests=c.int_("server", server, "max_pipelined_requests", 1, lo=1, hi=64),
        max_decompressed_mb=c.int_("server", server, "max_decompressed_mb", 64, lo=1, hi=4096),
        public_url=_public_url(c, server),
        max_connections_per_tenant=c.int_("server", server, "max_connections_per_tenant", 1, lo=1, hi=100_000)
        if "max_connections_per_tenant" in server else None,
        metrics_token=_metrics_token(c, server),
        metrics_bind=_metrics_bind(c, server),
        ledger_url=_ledger_url(c, ledger),
        journal_dir=_opt_path(c.opt_str("ledger", ledger, "journal_dir")),
        fsync=c.bool_("ledger", ledger, "fsync", False),
        keep_requests_months=c.int_("ledger", ledger, "keep_requests_months", 1, lo=1, hi=1200)
        if "keep_requests_months" in ledger else None,
        prices_dir=_opt_path(c.opt_str("pricing", pricing, "dir")),
        upstreams=_upstreams(c, arrays["upstream"]),
        tenants=tenants,
        tags=_names(c, "tag", arrays["tag"]),
        workloads=_workloads(c, tables["workloads"]),
        tier_aliases=_tier_aliases(c, arrays["tier_alias"]),
        estimate=_estimate(c, tables["estimate"]),
        selfhost=_selfhost(c, tables["selfhost"]),
        monthly_budget_usd=c.money("budget", tables["budget"], "monthly_usd"),
        reconcile=_reconcile(c, tables["reconcile"]),
        budgets=_budgets(c, budget_array, {t.name for t in tenants}),
        model_limits=_model_limits(c, arrays["model_limit"]),
        otel=_otel(c, tables["otel"]),
        config_file=src.path,
    )
    if s.workers > 1 and any(b.enforced for b in s.budgets) and not s.ledger_url.lower().startswith("postgres"):
        # Each worker would admit against its own view of a SQLite ledger (SPEC "Budgets (enforced)").
        c.fail("server", "workers", 0, "an enforced [[budget]] needs one process on a SQLite ledger: set "
               "workers = 1, or use a PostgreSQL ledger for several")
    if s.metrics_bind is not None and s.metrics_bind[1] == s.port:
        c.fail("server", "metrics_bind", 0, f"metrics_bind's port {s.port} is the port llmmeter serves "
               "/v1 on: give /metrics a port of its own")
    if errors:
        raise ConfigError("\n".join(errors))
    return s


class _Checker:
    """Typed getters that collect `file:line: problem` messages instead of raising."""

    def __init__(self, src: _Source, errors: list[str],
                 origins: Mapping[tuple[str, str | None], str] | None = None) -> None:
        self.src, self.errors, self.origins = src, errors, origins or {}

    def fail(self, table: str, key: str | None, index: int, msg: str) -> None:
        origin = self.origins.get((table, key)) or self.origins.get((table, None))
        self.errors.append(f"{origin or self.src.where(table, key, index)}: {msg}")

    def str_(self, table: str, d: Mapping[str, Any], key: str, default: str, i: int = 0) -> str:
        v = d.get(key, default)
        if not isinstance(v, str) or (key in d and not v):
            self.fail(table, key, i, f"{key} must be a non-empty string")
            return default
        if _CONTROL_RE.search(v):
            self.fail(table, key, i, f"{key} must not contain control characters (line breaks, tabs, NUL)")
            return default
        return v

    def opt_str(self, table: str, d: Mapping[str, Any], key: str, i: int = 0) -> str | None:
        return self.str_(table, d, key, "", i) if key in d else None

    def int_(self, table: str, d: Mapping[str, Any], key: str, default: int, i: int = 0,
             lo: int = 0, hi: int = 10**12) -> int:
        v = d.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            self.fail(table, key, i, f"{key} must be a whole number from {lo} to {hi}, got {v!r}")
            return default
        return v

    def num(self, table: str, d: Mapping[str, Any], key: str, default: float, i: int = 0) -> float:
        v = d.get(key, default)
        # nan passes `v <= 0` and would then make every timer fire at once (or never).
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= 10**7:
            self.fail(table, key, i, f"{key} must be a positive number of seconds (at most 10000000)")
            return default
        return float(v)

    def bool_(self, table: str, d: Mapping[str, Any], key: str, default: bool, i: int = 0) -> bool:
        v = d.get(key, default)
        if not isinstance(v, bool):
            self.fail(table, key, i, f"{key} must be true or false")
            return default
        return v

    def money(self, table: str, d: Mapping[str, Any], key: str, default: str = "0",
              i: int = 0) -> Decimal:
        v = d.get(key, default)
        if isinstance(v, bool) or not isinstance(v, str | int):
            self.fail(table, key, i, f'{key} must be a decimal string, e.g. "{default}"')
            return Decimal(default)
        try:
            value = Decimal(str(v))
        except InvalidOperation:
            value = Decimal(-1)
        if not value.is_finite() or not 0 <= value <= MAX_USD:
            self.fail(table, key, i, f"{key} must be a decimal from 0 to {MAX_USD}, got {v!r}")
            return Decimal(default)
        return value

    def globs(self, table: str, d: Mapping[str, Any], key: str, i: int) -> tuple[str, ...]:
        v = d.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            self.fail(table, key, i, f"{key} must be a list of non-empty strings")
            return ()
        return tuple(v)


def _array_name(c: _Checker, table: str, item: Mapping[str, Any], i: int, taken: set[str]) -> str:
    """The `name` of the i-th [[table]]: required, a label-safe word, unique among `taken`."""
    name = c.str_(table, item, "name", f"{table}{i}", i)
    if "name" not in item:
        c.fail(table, None, i, f"[[{table}]] needs a name")
    elif not _NAME_RE.match(name):
        c.fail(table, "name", i, f"{table} name {name!r} must be letters, digits, '-', '_' or '.'")
    if name in taken:
        c.fail(table, "name", i, f"duplicate {table} name {name!r}")
    return name


def _budgets(c: _Checker, items: list[dict[str, Any]], tenants: set[str]) -> tuple[Budget, ...]:
    out: list[Budget] = []
    for i, b in enumerate(items):
        name = _array_name(c, "budget", b, i, {o.name for o in out})
        if "limit_usd" not in b:
            c.fail("budget", None, i, f"[[budget]] {name!r} needs limit_usd")
        limit = c.money("budget", b, "limit_usd", "0", i)
        if limit > MAX_BUDGET_USD or limit.as_tuple().exponent < -10:  # type: ignore[operator]
            c.fail("budget", "limit_usd", i, f"limit_usd must be at most {MAX_BUDGET_USD:,} with at most 10 "
                   "decimal places")
            limit = Decimal(0)
        tenant = c.opt_str("budget", b, "tenant", i)
        if tenant is not None and tenants and tenant not in tenants:
            c.fail("budget", "tenant", i, f"budget {name!r} names tenant {tenant!r}, which no [[tenant]] defines")
        tag = c.opt_str("budget", b, "tag", i)
        for key, value in (("tenant", tenant), ("tag", tag)):
            # A request's tag and header tenant arrive cleaned (letters, digits, _ . : / -, 64 at
            # most): a budget naming anything else would match no request and gate nothing.
            if value is not None and not _LABEL_RE.match(value):
                c.fail("budget", key, i, f"{key} {value!r} can never match a request: use letters, digits and "
                       "_ . : / - (64 at most), as requests' tags and tenants are cleaned")
        period = c.str_("budget", b, "period", "month", i)
        if period not in BUDGET_PERIODS:
            c.fail("budget", "period", i, f'period must be "day" or "month", not {period!r}')
        tz = c.str_("budget", b, "tz", "UTC", i)
        try:
            ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            c.fail("budget", "tz", i, f"tz {tz!r} is not a time zone name (e.g. Europe/Berlin, UTC)")
        mode = c.str_("budget", b, "mode", "alert", i)
        if mode not in BUDGET_MODES:
            c.fail("budget", "mode", i, f'mode must be "alert" or "enforce", not {mode!r}')
        pcts = b.get("alert_at_pct", [50, 80, 100])
        if not isinstance(pcts, list) or not all(type(p) is int and 1 <= p <= 1000 for p in pcts):
            c.fail("budget", "alert_at_pct", i, "alert_at_pct must be a list of whole percentages from 1 to 1000")
            pcts = [50, 80, 100]
        out.append(Budget(name=name, limit_usd=limit, tenant=tenant, tag=tag, period=period, tz=tz, mode=mode,
                          alert_at_pct=tuple(sorted(set(pcts))),
                          allow_unpriced=c.bool_("budget", b, "allow_unpriced", False, i)))
    return tuple(out)


def _model_limits(c: _Checker, items: list[dict[str, Any]]) -> tuple[ModelLimit, ...]:
    out = []
    for i, m in enumerate(items):
        match = c.globs("model_limit", m, "match", i)
        if not match:
            c.fail("model_limit", "match", i, "[[model_limit]] needs match = [model globs]")
        out.append(ModelLimit(match, c.int_("model_limit", m, "max_output", 32768, i, lo=1, hi=10**9)))
    return tuple(out)


def _reconcile(c: _Checker, table: Mapping[str, Any]) -> dict[str, ReconcileSource]:
    out = dict(RECONCILE_DEFAULTS)
    for name, default in RECONCILE_DEFAULTS.items():
        section = f"reconcile.{name}"
        d = table.get(name, {})
        if not isinstance(d, dict):
            c.fail("reconcile", name, 0, f"[{section}] must be a table")
            continue
        for key in d:
            if key not in _RECONCILE_KEYS:
                known = ", ".join(sorted(_RECONCILE_KEYS))
                c.fail(section, key, 0, f"unknown key {key!r} in [{section}] (known: {known})")
        base = c.str_(section, d, "base_url", default.base_url)
        if not re.match(r"^https?://[^/\s]+", base):
            c.fail(section, "base_url", 0, "base_url must be an http:// or https:// URL")
        env = c.str_(section, d, "admin_key_env", default.admin_key_env)
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*\Z", env):
            # Not echoed: a key pasted here by mistake must not reach a terminal or a log.
            c.fail(section, "admin_key_env", 0, "admin_key_env is not an environment variable name (it names "
                   "the variable that holds the admin key, e.g. OPENAI_ADMIN_KEY)")
        out[name] = ReconcileSource(env, base.rstrip("/"), c.globs(section, d, "project_ids", 0),
                                    c.globs(section, d, "api_key_ids", 0), c.globs(section, d, "workspace_ids", 0),
                                    c.globs(section, d, "upstreams", 0))
    return out


def _upstreams(c: _Checker, items: list[dict[str, Any]]) -> tuple[Upstream, ...]:
    out: list[Upstream] = []
    for i, u in enumerate(items):
        name = _array_name(c, "upstream", u, i, {o.name for o in out})
        base = c.str_("upstream", u, "base_url", "", i)
        if "base_url" not in u:  # without one, every call would fail inside the relay
            c.fail("upstream", None, i, f"[[upstream]] {name!r} needs a base_url (e.g. \"https://api.moonshot.ai/v1\")")
        for key in ("base_url", "anthropic_base_url"):
            url = u.get(key)
            if url is not None and not (isinstance(url, str) and re.match(r"^https?://[^/\s]+", url)):
                c.fail("upstream", key, i, f"{key} must be an http:// or https:// URL")
        env_name = c.opt_str("upstream", u, "api_key_env", i)
        out.append(Upstream(
            name=name, base_url=base.rstrip("/"),
            anthropic_base_url=(c.opt_str("upstream", u, "anthropic_base_url", i) or "").rstrip("/") or None,
            api_key_env=env_name, models=c.globs("upstream", u, "models", i),
            inject_include_usage=c.bool_("upstream", u, "inject_include_usage", True, i),
            self_hosted=c.bool_("upstream", u, "self_hosted", False, i),
            max_connections=c.int_("upstream", u, "max_connections", 100, i, lo=1, hi=100_000),
            idle_s=c.num("upstream", u, "idle_s", 30.0, i),
            ca_file=_opt_file(c, u, "ca_file", i), client_cert=_opt_file(c, u, "client_cert", i),
            client_key=_opt_file(c, u, "client_key", i), proxy=_egress_proxy(c, u, i),
            hidden_output=_hidden_output(c, u, base, i),
            honoured_tiers=tuple(t.strip().lower() for t in c.globs("upstream", u, "honoured_tiers", i))))
        if (u.get("client_cert") is None) != (u.get("client_key") is None):
            c.fail("upstream", "client_cert", i, "client_cert and client_key go together")
    return tuple(out)


# Upstreams known to bill output that completion_tokens leaves out (SPEC "Usage extraction").
_HIDDEN_OUTPUT_HOSTS = ("api.x.ai", "generativelanguage.googleapis.com")
HIDDEN_OUTPUT_MODES = ("from_total", "flag")


def _hidden_output(c: _Checker, u: Mapping[str, Any], base_url: str, i: int) -> str:
    host = (urlsplit(base_url).hostname or "").lower() if base_url else ""
    default = "from_total" if host in _HIDDEN_OUTPUT_HOSTS else "flag"
    value = c.str_("upstream", u, "hidden_output", default, i)
    if value not in HIDDEN_OUTPUT_MODES:
        c.fail("upstream", "hidden_output", i, f"hidden_output must be one of {', '.join(HIDDEN_OUTPUT_MODES)}, "
               f"not {value!r}")
        return default
    return value


def _public_url(c: _Checker, server: Mapping[str, Any]) -> str | None:
    value = c.opt_str("server", server, "public_url")
    if value is None:
        return None
    if not re.match(r"^https?://[^/\s?#]+(/[^\s?#]*)?$", value):
        c.fail("server", "public_url", 0, "public_url must be an http:// or https:// URL with no query or fragment")
        return None
    return value.rstrip("/")


def _opt_file(c: _Checker, u: Mapping[str, Any], key: str, i: int) -> Path | None:
    value = c.opt_str("upstream", u, key, i)
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        c.fail("upstream", key, i, f"{key} {value!r} is not a readable file")
    return path


def _egress_proxy(c: _Checker, u: Mapping[str, Any], i: int) -> str | None:
    value = c.opt_str("upstream", u, "proxy", i)
    if value is None or value == "none":
        return value
    if not re.match(r"^https?://[^/\s@]+/?$", value) and not re.match(r"^https?://[^/\s]+@[^/\s@]+/?$", value):
        c.fail("upstream", "proxy", i, 'proxy must be an http:// or https:// URL (host and port only) or "none"')
    return value


def tenant_name_problem(name: str) -> str | None:
    """Why `name` cannot be a tenant, or None: the one rule for the config and `keys new`."""
    if not _NAME_RE.match(name):
        return (f"tenant name {name!r} must be 1 to 64 letters, digits, '-', '_' or '.', "
                "starting with a letter or digit")
    if name.lower() in RESERVED_TENANTS:
        return (f"tenant name {name!r} is reserved: llmmeter's metrics use "
                f"{', '.join(sorted(RESERVED_TENANTS))} as labels of their own")
    return None


def _tenants(c: _Checker, items: list[dict[str, Any]]) -> tuple[Tenant, ...]:
    out: list[Tenant] = []
    owner: dict[str, str] = {}  # key_sha256 -> tenant: one key bills one tenant
    for i, t in enumerate(items):
        name = c.str_("tenant", t, "name", f"tenant{i}", i)
        problem = tenant_name_problem(name)
        if "name" not in t:  # a made-up name would bill the tenant's traffic to a label nobody chose
            c.fail("tenant", None, i, "[[tenant]] needs a name")
        elif problem:
            c.fail("tenant", "name", i, problem)
        if any(o.name == name for o in out):
            c.fail("tenant", "name", i, f"duplicate tenant name {name!r}")
        keys = c.globs("tenant", t, "key_sha256", i)
        for k in keys:
            if not _HEX64_RE.match(k):
                c.fail("tenant", "key_sha256", i, "key_sha256 entries must be 64 lower-case hex "
                       "digits (run `llmmeter keys new TENANT`)")
            elif owner.setdefault(k, name) != name:
                c.fail("tenant", "key_sha256", i, f"key_sha256 {k[:12]}… is also tenant {owner[k]!r}'s: "
                       "a key must identify one tenant")
        out.append(Tenant(name, tuple(keys), c.money("tenant", t, "monthly_budget_usd", "0", i)))
    return tuple(out)


def _ledger_url(c: _Checker, ledger: Mapping[str, Any]) -> str:
    url = c.str_("ledger", ledger, "url", "sqlite:///data/llmmeter.db")
    if "://" not in url and re.search(r"[A-Za-z_]\s*=", url):
        # Taken as a SQLite file name, it would be created, and shown in messages, password and all.
        c.fail("ledger", "url", 0, "url looks like a keyword/value connection string (host=... dbname=...): "
               "write it as postgresql://user@host:port/dbname, the password in ~/.pgpass, a service "
               "file or PGPASSWORD")
        return "sqlite:///data/llmmeter.db"
    return url


def _metrics_token(c: _Checker, server: Mapping[str, Any]) -> str | None:
    token = c.opt_str("server", server, "metrics_token")
    if token is not None and not _TOKEN_RE.match(token):
        # The token itself is never quoted back: it is a secret.
        c.fail("server", "metrics_token", 0, "metrics_token must be printable ASCII without spaces "
               "(what a client sends in its Authorization header)")
        return None
    return token


def _metrics_bind(c: _Checker, server: Mapping[str, Any]) -> tuple[str, int] | None:
    """`host:port` (an IPv6 host in brackets: `[::1]:9464`)."""
    value = c.opt_str("server", server, "metrics_bind")
    if value is None:
        return None
    m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]+):([0-9]{1,5})", value)
    if m is None or not 1 <= int(m[2]) <= 65535:
        c.fail("server", "metrics_bind", 0, f"metrics_bind {value!r} must be host:port, e.g. "
               "\"127.0.0.1:9464\" or \"[::1]:9464\"")
        return None
    return m[1].strip("[]"), int(m[2])


def _tier_aliases(c: _Checker, items: list[dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    out: dict[str, str] = {}
    for i, a in enumerate(items):
        pair: list[str] = []
        for key in ("from", "to"):
            if key not in a:
                c.fail("tier_alias", None, i, f"[[tier_alias]] needs {key!r}")
            value = c.str_("tier_alias", a, key, "", i).strip().lower()
            if key in a and value and not _NAME_RE.match(value):
                c.fail("tier_alias", key, i, f"tier {value!r} must be letters, digits, '-', '_' or '.'")
            pair.append(value)
        source, target = pair
        if source in out:
            c.fail("tier_alias", "from", i, f"duplicate tier alias from {source!r}")
        if source and target:
            out[source] = target
    return tuple(out.items())


def _names(c: _Checker, table: str, items: list[dict[str, Any]]) -> tuple[str, ...]:
    names: list[str] = []
    for i, item in enumerate(items):
        name = c.str_(table, item, "name", "", i)
        if "name" not in item:
            c.fail(table, None, i, f"[[{table}]] needs a name")
        elif name and not _NAME_RE.match(name):
            c.fail(table, "name", i, f"{table} name {name!r} must be letters, digits, '-', '_' or '.'")
        elif table == "tag" and name.lower() in RESERVED_TAGS:
            c.fail(table, "name", i, f"tag name {name!r} is reserved: untagged requests are counted as it")
        if name in names:
            c.fail(table, "name", i, f"duplicate {table} name {name!r}")
        names.append(name)
    return tuple(n for n in names if n)


def _workloads(c: _Checker, d: Mapping[str, Any]) -> Workloads:
    w = Workloads(c.int_("workloads", d, "medium", 4096, lo=1),
                  c.int_("workloads", d, "long", 32768, lo=1),
                  c.int_("workloads", d, "very_long", 131072, lo=1))
    if not w.medium < w.long < w.very_long:
        c.fail("workloads", None, 0, "workload bounds must grow: medium < long < very_long")
    return w


def _estimate(c: _Checker, d: Mapping[str, Any]) -> Estimate:
    encodings = ("o200k_base", "cl100k_base")
    enc = c.str_("estimate", d, "encoding", "o200k_base")
    if enc not in encodings:
        c.fail("estimate", "encoding", 0, f"encoding must be one of {', '.join(encodings)}")
    per_model: list[tuple[tuple[str, ...], str]] = []
    models = d.get("model", [])
    if not isinstance(models, list) or not all(isinstance(m, dict) for m in models):
        c.fail("estimate", "model", 0, "use [[estimate.model]] tables")
        models = []
    for i, m in enumerate(models):
        unknown = set(m) - {"match", "encoding"}
        if unknown:
            c.fail("estimate.model", sorted(unknown)[0], i, f"unknown key {sorted(unknown)[0]!r} in [[estimate.model]]")
        e = c.str_("estimate.model", m, "encoding", "o200k_base", i)
        if e not in encodings:
            c.fail("estimate.model", "encoding", i, f"encoding must be one of {', '.join(encodings)}")
        per_model.append((c.globs("estimate.model", m, "match", i), e))
    engine = c.str_("estimate", d, "engine", "tiktoken")
    if engine not in ("compact", "tiktoken"):
        c.fail("estimate", "engine", 0, "engine must be one of compact, tiktoken")
    return Estimate(enc, tuple(per_model), engine)


def _selfhost(c: _Checker, d: Mapping[str, Any]) -> SelfHost:
    base = SelfHost()
    return SelfHost(
        nodes=c.int_("selfhost", d, "nodes", base.nodes, lo=1, hi=10_000),
        node_capex_usd=c.money("selfhost", d, "node_capex_usd", str(base.node_capex_usd)),
        amortization_months=c.int_("selfhost", d, "amortization_months", base.amortization_months, lo=1, hi=600),
        power_kw_per_node=c.money("selfhost", d, "power_kw_per_node", str(base.power_kw_per_node)),
        usd_per_kwh=c.money("selfhost", d, "usd_per_kwh", str(base.usd_per_kwh)),
        ops_usd_per_month=c.money("selfhost", d, "ops_usd_per_month", str(base.ops_usd_per_month)),
        node_prefill_tokens_per_s=c.int_("selfhost", d, "node_prefill_tokens_per_s",
                                         base.node_prefill_tokens_per_s, lo=1),
        node_decode_tokens_per_s=c.int_("selfhost", d, "node_decode_tokens_per_s",
                                        base.node_decode_tokens_per_s, lo=1),
        node_profiles=_node_profiles(c, d.get("node", [])),
        equivalents=_equivalents(c, d.get("equivalent", [])),
        overridden=frozenset(d) - {"node", "equivalent"})


def _node_profiles(c: _Checker, items: object) -> tuple[NodeProfile, ...]:
    """The [[selfhost.node]] tables: every figure required (capex or rent, power optional) and
    each with its `<figure>_source`, so no number in the report stands without its origin."""
    table = "selfhost.node"
    if not isinstance(items, list) or not all(isinstance(v, dict) for v in items):
        c.fail("selfhost", "node", 0, "use [[selfhost.node]] tables for 'node'")
        return ()
    out: list[NodeProfile] = []
    for i, item in enumerate(items):
        for key in item:
            if key not in _NODE_KEYS:
                c.fail(table, key, i, f"unknown key {key!r} in [[selfhost.node]] "
                       f"(known: {', '.join(sorted(_NODE_KEYS))})")
        name = _array_name(c, table, item, i, {o.name for o in out})
        for key in ("accelerators", "kv_cache_tokens", "prefill_tokens_per_s", "decode_tokens_per_s"):
            if key not in item:
                c.fail(table, None, i, f"[[selfhost.node]] {name!r} needs {key}")
        if "capex_usd" not in item and "rent_usd_per_month" not in item:
            c.fail(table, None, i, f"[[selfhost.node]] {name!r} needs capex_usd or rent_usd_per_month")
        sources = []
        for figure in NODE_FIGURES:
            if figure not in item:
                if f"{figure}_source" in item:
                    c.fail(table, f"{figure}_source", i, f"{figure}_source is set but {figure} is not")
                continue
            if f"{figure}_source" not in item:
                c.fail(table, None, i, f"[[selfhost.node]] {name!r} needs {figure}_source: where {figure} comes "
                       'from (e.g. "vendor claim: ..." or "assumption: ...")')
                continue
            sources.append((figure, c.str_(table, item, f"{figure}_source", "?", i)))
        money = {key: c.money(table, item, key, "0", i) if key in item else None
                 for key in ("capex_usd", "rent_usd_per_month", "power_kw")}
        out.append(NodeProfile(
            name=name, accelerators=c.str_(table, item, "accelerators", "?", i),
            kv_cache_tokens=c.int_(table, item, "kv_cache_tokens", 1, i, lo=1),
            prefill_tokens_per_s=c.int_(table, item, "prefill_tokens_per_s", 1, i, lo=1),
            decode_tokens_per_s=c.int_(table, item, "decode_tokens_per_s", 1, i, lo=1),
            capex_usd=money["capex_usd"], rent_usd_per_month=money["rent_usd_per_month"],
            power_kw=money["power_kw"], sources=tuple(sources)))
    return tuple(out)


_EQUIVALENT_RE = re.compile(r"[a-z0-9_\-]+:\S+\Z")  # provider_id:model, as genai-prices names them


def _equivalents(c: _Checker, items: object) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The [[selfhost.equivalent]] tables: a model as llmmeter names it, and the genai-prices
    `provider_id:model` entries that are the same model elsewhere."""
    table = "selfhost.equivalent"
    if not isinstance(items, list) or not all(isinstance(v, dict) for v in items):
        c.fail("selfhost", "equivalent", 0, "use [[selfhost.equivalent]] tables for 'equivalent'")
        return ()
    out: dict[str, tuple[str, ...]] = {}
    for i, item in enumerate(items):
        for key in item:
            if key not in ("model", "provider_models"):
                c.fail(table, key, i, f"unknown key {key!r} in [[selfhost.equivalent]] (known: model, provider_models)")
        model = c.str_(table, item, "model", "", i)
        if not model:
            c.fail(table, None, i, "[[selfhost.equivalent]] needs model")
        elif model in out:
            c.fail(table, "model", i, f"model {model!r} has two [[selfhost.equivalent]] tables")
        entries = item.get("provider_models")
        if not isinstance(entries, list) or not entries or not all(isinstance(e, str) for e in entries):
            c.fail(table, "provider_models" if "provider_models" in item else None, i,
                   "provider_models must be a non-empty list of \"provider_id:model\" strings")
            continue
        for e in entries:
            if not _EQUIVALENT_RE.match(e):
                c.fail(table, "provider_models", i, f"{e!r} is not provider_id:model "
                       "(e.g. \"together:moonshotai/Kimi-K3.1-Pro\")")
        out[model] = tuple(entries)
    return tuple(out.items())


_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")  # RFC 9110 5.6.2 token
MAX_OTEL_QUEUE = 1_000_000


def _otel(c: _Checker, d: Mapping[str, Any]) -> Otel:
    endpoint = c.opt_str("otel", d, "endpoint")
    if endpoint is not None and not re.match(r"https?://[^/\s]+", endpoint):
        c.fail("otel", "endpoint", 0, f"endpoint must be an http:// or https:// URL, got {endpoint!r}")
        endpoint = None
    headers: list[tuple[str, str]] = []
    raw = d.get("headers", {})
    if not isinstance(raw, dict):
        c.fail("otel", "headers", 0, 'headers must be a table of strings, e.g. headers = { "x-api-key" = "..." }')
        raw = {}
    for name, value in raw.items():
        if not _HEADER_NAME.match(name) or not isinstance(value, str) or _CONTROL_RE.search(value):
            # The value is not repeated: it may be a collector's key.
            c.fail("otel", "headers", 0, f"headers: {name!r} must be a header name with a string value "
                   "without control characters")
            continue
        headers.append((name.lower(), value))
    ratio = d.get("sample_ratio", 1.0)
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
        c.fail("otel", "sample_ratio", 0, f"sample_ratio must be a number from 0 to 1, got {ratio!r}")
        ratio = 1.0
    return Otel(endpoint=endpoint, headers=tuple(headers),
                service_name=c.str_("otel", d, "service_name", "llmmeter"), sample_ratio=float(ratio),
                queue_size=c.int_("otel", d, "queue_size", 2048, lo=1, hi=MAX_OTEL_QUEUE))


def _opt_path(s: str | None) -> Path | None:
    return Path(s) if s else None


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*\Z")
_SAFE_USER = re.compile(r"[A-Za-z0-9._~%+\-]+\Z")
_SAFE_HOSTS = re.compile(r"[A-Za-z0-9._\-\[\]:,%]*\Z")  # host[:port], IPv6 in [], or several
_SAFE_DBNAME = re.compile(r"[A-Za-z0-9._\-$%]*\Z")
_DSN_PAIR = re.compile(r"\s*([A-Za-z_]+)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']*)")
_DSN_SHOWN = ("host", "hostaddr", "port", "dbname", "user")


def redact_url(url: str) -> str:
    """A ledger URL or DSN fit for logs and messages: never a password, whatever the spelling.

    URLs keep scheme, user, host, port and database name, each only if it is made of
    characters no password needs; the query (`?password=`) is dropped. Userinfo ends at the
    last '@', so an unencoded '/', '?' or '@' in a password stays inside it. A keyword/value
    DSN (`host=... password=...`) keeps host, port, dbname and user."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        if "=" in url:
            return _redact_dsn(url)
        return "…" if "@" in url else url  # a plain SQLite path holds no secret; `user:pw@host` might
    if not _SCHEME.match(scheme):
        return "…"
    if scheme.lower() == "sqlite":
        return f"{scheme}://{rest.split('?', 1)[0]}"
    userinfo, at, location = rest.rpartition("@")
    if "?" in userinfo or "#" in userinfo:
        # An '@' in the query (`?password=a@b`) or in a password after '?': either way a
        # part of a password would be shown as the host.
        return f"{scheme}://…"
    user = userinfo.partition(":")[0]
    shown_user = f"{user}@" if at and _SAFE_USER.match(user) else ""
    m = re.match(r"([^/?#]*)(/?)([^?#]*)", location)
    hosts, slash, dbname = m.groups() if m else ("", "", "")
    hosts = hosts if _SAFE_HOSTS.match(hosts) else "…"
    dbname = dbname if _SAFE_DBNAME.match(dbname) else "…"
    return f"{scheme}://{shown_user}{hosts}{slash}{dbname}"


def _redact_dsn(dsn: str) -> str:
    shown: list[str] = []
    pos = 0
    while pos < len(dsn.rstrip()):
        m = _DSN_PAIR.match(dsn, pos)
        if m is None or m.end() == pos:
            shown.append("…")  # the rest does not parse: it may hold anything
            break
        key, value = m.groups()
        if key.lower() in _DSN_SHOWN:
            shown.append(f"{key}={value}")
        pos = m.end()
    return " ".join(shown)
