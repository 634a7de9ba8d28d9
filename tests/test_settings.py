"""Config loading: precedence, validation with file:line, and the api_key_env rule."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from proxy.errors import ConfigError
from proxy.metrics.exposure import check_metrics_exposure
from proxy.settings import ReconcileSource, load, redact_url, resolve_api_keys, tenant_name_problem

FULL = """\
[server]
host = "127.0.0.1"
port = 9090

[ledger]
url = "sqlite:///data/x.db"

[[upstream]]
name = "moonshot"
base_url = "https://api.moonshot.ai/v1/"
anthropic_base_url = "https://api.moonshot.ai/anthropic/v1"
api_key_env = "MOONSHOT_API_KEY"
models = ["kimi-*"]

[[upstream]]
name = "selfhosted"
base_url = "http://127.0.0.1:8000/v1"
self_hosted = true

[[tenant]]
name = "search-team"
key_sha256 = ["%s"]
monthly_budget_usd = "500"

[[tag]]
name = "rag-search"

[workloads]
medium = 2048

[[tier_alias]]
from = "Turbo"
to = "highspeed"

[selfhost]
nodes = 1

[budget]
monthly_usd = "1000"
""" % ("a" * 64)


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "llmmeter.toml"
    p.write_text(text)
    return p


def test_full_config_loads(tmp_path: Path) -> None:
    s = load(write(tmp_path, FULL), env={})
    assert s.port == 9090 and s.ledger_url == "sqlite:///data/x.db"
    assert [u.name for u in s.upstreams] == ["moonshot", "selfhosted"]
    assert s.upstreams[0].base_url == "https://api.moonshot.ai/v1"
    assert s.upstreams[1].self_hosted and not s.upstreams[1].models
    assert s.tenants[0].monthly_budget_usd == Decimal("500") and s.keys_required
    assert s.tags == ("rag-search",) and s.workloads.medium == 2048
    assert s.tier_aliases == (("turbo", "highspeed"),)
    assert s.selfhost.nodes == 1 and "nodes" in s.selfhost.overridden
    assert s.monthly_budget_usd == Decimal("1000")
    assert s.estimate.engine == "tiktoken"  # the default
    assert load(write(tmp_path, FULL + "\n[estimate]\nengine = \"compact\"\n"), env={}).estimate.engine == "compact"


def test_precedence_flag_over_env_over_file(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    assert load(path, env={"LLMMETER_PORT": "7000"}).port == 7000
    assert load(path, env={"LLMMETER_PORT": "7000"}, overrides={"port": 7001}).port == 7001
    s = load(path, env={"LLMMETER_UPSTREAM": "http://127.0.0.1:1/v1", "LLMMETER_UPSTREAM_API_KEY": "k"})
    assert [(u.name, u.base_url, u.api_key) for u in s.upstreams] == [("default", "http://127.0.0.1:1/v1", "k")]
    s = load(None, env={"LLMMETER_UPSTREAM_API_KEY": "k2"}, overrides={"upstream": "http://127.0.0.1:2/v1"})
    assert s.upstreams[0].api_key == "k2"


@pytest.mark.parametrize(("text", "line", "words"), [
    ("[server]\nport = 1\nbogus = 2\n", 3, "unknown key 'bogus' in [server]"),
    ("[[upstream]]\nname = \"a\"\nbase_url = \"http://x\"\n\n[[upstream]]\nname = \"b\"\nbase_url = \"http://y\"\n"
     "colour = 1\n", 8, "unknown key 'colour' in [[upstream]]"),
    ("[mystery]\nx = 1\n", 1, "unknown section or key 'mystery'"),
    ("[[upstream]]\nname = \"a\"\nbase_url = \"http://x\"\n[[upstream]]\nname = \"a\"\nbase_url = \"http://y\"\n",
     5, "duplicate upstream name 'a'"),
    ("[server]\nport = \"eighty\"\n", 2, "port must be a whole number"),
    ("[[upstream]]\nname = \"a\"\nbase_url = \"ftp://x\"\n", 3, "base_url must be an http"),
    ("[[tenant]]\nname = \"t\"\nkey_sha256 = [\"abc\"]\n", 3, "64 lower-case hex"),
    ("[workloads]\nmedium = 5000\nlong = 4000\n", 1, "must grow"),
    ("[budget]\nmonthly_usd = 12.5\n", 2, "decimal string"),
    ("[server\nport = 1\n", 1, "Expected"),
    ("[estimate]\nencoding = \"o200k_base\"\nengine = \"rust\"\n", 3, "engine must be one of compact, tiktoken"),
    # Required by the docs, so required here: without them serve used to start and fail every call,
    # or bill a tenant as "tenant0".
    ("[server]\nport = 1\n\n[[upstream]]\nname = \"a\"\nmodels = [\"m\"]\n", 4, "[[upstream]] 'a' needs a base_url"),
    ("[[tenant]]\nname = \"a\"\n\n[[tenant]]\nkey_sha256 = []\n", 4, "[[tenant]] needs a name"),
])
def test_bad_config_names_file_and_line(tmp_path: Path, text: str, line: int, words: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load(path, env={})
    msg = str(e.value)
    assert words in msg
    assert f"{path}:{line}" in msg or (words == "Expected" and str(path) in msg and f"line {line}" in msg)


def test_unset_api_key_env_refuses_to_start(tmp_path: Path) -> None:
    s = load(write(tmp_path, FULL), env={})
    with pytest.raises(ConfigError, match="MOONSHOT_API_KEY"):
        resolve_api_keys(s, env={})
    ok = resolve_api_keys(s, env={"MOONSHOT_API_KEY": "sk-m"})
    assert ok.upstreams[0].api_key == "sk-m"
    assert "sk-m" not in repr(ok)


def test_selfhost_monthly_cost_formula() -> None:
    s = load(None, env={})
    # 2 x 600000 / 36 + 2 x 15 kW x 730 h x 0.12 + 20000
    expected = Decimal(2 * 600000) / 36 + Decimal(2 * 15 * 730) * Decimal("0.12") + 20000
    assert s.selfhost.monthly_cost_usd() == expected


def test_shipped_example_config_loads() -> None:
    example = Path(__file__).parents[1] / "llmmeter.example.toml"
    s = load(example, env={"MOONSHOT_API_KEY": "k"})
    assert [u.name for u in s.upstreams] == ["selfhosted", "moonshot"]
    assert [t.name for t in s.tenants] == ["search-team", "agents"] and s.keys_required
    assert [(b.name, b.enforced) for b in s.budgets] == [("search-team-monthly", True), ("everything-daily", False)]
    # Tenants' keys and host 0.0.0.0: serve needs a metrics token, which the file says how to give.
    with pytest.raises(ConfigError, match=r"server\.metrics_token"):
        check_metrics_exposure(s)
    check_metrics_exposure(load(example, env={"MOONSHOT_API_KEY": "k", "LLMMETER_METRICS_TOKEN": "mt"}))


def test_an_upstream_key_with_a_trailing_newline_is_trimmed(tmp_path: Path) -> None:
    s = load(write(tmp_path, FULL), env={})
    ok = resolve_api_keys(s, env={"MOONSHOT_API_KEY": "sk-m\n"})
    assert ok.upstreams[0].api_key == "sk-m"
    with pytest.raises(ConfigError, match=r"MOONSHOT_API_KEY.*control character"):
        resolve_api_keys(s, env={"MOONSHOT_API_KEY": "sk-m\r\nx-evil: 1"})
    with pytest.raises(ConfigError, match="not set"):
        resolve_api_keys(s, env={"MOONSHOT_API_KEY": " \n"})
    shorthand = load(None, env={"LLMMETER_UPSTREAM": "http://127.0.0.1:9/v1", "LLMMETER_UPSTREAM_API_KEY": "k\n"})
    assert resolve_api_keys(shorthand, env={}).upstreams[0].api_key == "k"


@pytest.mark.parametrize("line", ["read_timeout_s = nan", "head_timeout_s = inf", "idle_timeout_s = -1",
                                  "send_timeout_s = 0", "body_timeout_s = true"])
def test_timeouts_must_be_finite_and_positive(tmp_path: Path, line: str) -> None:
    with pytest.raises(ConfigError, match=line.split(" ")[0]):
        load(write(tmp_path, f"[server]\n{line}\n"), env={})


def test_data_plane_limits_load(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    s = load(write(tmp_path, f"""
[server]
head_timeout_s = 5
max_decompressed_mb = 8
max_pipelined_requests = 4

[[upstream]]
name = "a"
base_url = "https://127.0.0.1:9/v1"
max_connections = 3
idle_s = 2.5
ca_file = "{ca}"
proxy = "http://127.0.0.1:3128"
"""), env={})
    assert (s.head_timeout_s, s.max_decompressed_mb, s.idle_timeout_s, s.max_pipelined_requests) == (5, 8, 75, 4)
    with pytest.raises(ConfigError, match="max_pipelined_requests"):
        load(write(tmp_path, "[server]\nmax_pipelined_requests = 0\n"), env={})
    up = s.upstreams[0]
    assert (up.max_connections, up.idle_s, up.ca_file, up.proxy) == (3, 2.5, ca, "http://127.0.0.1:3128")
    with pytest.raises(ConfigError, match="ca_file"):
        load(write(tmp_path, '[[upstream]]\nname = "a"\nbase_url = "https://x/v1"\nca_file = "/nonexistent.pem"\n'),
             env={})
    with pytest.raises(ConfigError, match="client_cert and client_key"):
        load(write(tmp_path, f'[[upstream]]\nname = "a"\nbase_url = "https://x/v1"\nclient_cert = "{ca}"\n'),
             env={})


@pytest.mark.parametrize(("env", "overrides", "where", "words"), [
    ({}, {"port": 99999}, "flag --port", "port must be a whole number from 1 to 65535, got 99999"),
    ({}, {"port": 0}, "flag --port", "from 1 to 65535"),
    ({"LLMMETER_PORT": "99999"}, {}, "variable LLMMETER_PORT", "from 1 to 65535"),
    ({"LLMMETER_PORT": "http"}, {}, "variable LLMMETER_PORT", "got 'http'"),
    ({}, {"workers": 0}, "flag --workers", "workers must be a whole number from 1 to 256"),
    ({"LLMMETER_WORKERS": "10000"}, {}, "variable LLMMETER_WORKERS", "from 1 to 256"),
    ({}, {"upstream": "ftp://x"}, "flag --upstream", "base_url must be an http"),
    ({"LLMMETER_UPSTREAM": "x"}, {}, "variable LLMMETER_UPSTREAM", "base_url must be an http"),
    ({"LLMMETER_METRICS_TOKEN": "tökén"}, {}, "variable LLMMETER_METRICS_TOKEN", "printable ASCII"),
    ({"LLMMETER_METRICS_TOKEN": "two words"}, {}, "variable LLMMETER_METRICS_TOKEN", "without spaces"),
    ({}, {"host": ""}, "flag --host", "host must be a non-empty string"),
    ({"LLMMETER_DB": "data/x.db\n"}, {}, "variable LLMMETER_DB", "control characters"),
])
def test_flags_and_variables_pass_the_file_checks_and_are_named(
        env: dict[str, str], overrides: dict[str, object], where: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        load(None, env=env, overrides=overrides)
    assert str(e.value).startswith(f"{where}: ") and words in str(e.value)


def test_a_flag_rejection_names_the_flag_even_over_a_valid_file(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    with pytest.raises(ConfigError, match=r"^variable LLMMETER_PORT: port"):
        load(path, env={"LLMMETER_PORT": "65536"})
    with pytest.raises(ConfigError, match=r"^flag --port: port"):
        load(path, env={"LLMMETER_PORT": "7000"}, overrides={"port": -1})
    # The flag wins over a bad variable, as it wins over a good one.
    assert load(path, env={"LLMMETER_PORT": "nope"}, overrides={"port": 7001}).port == 7001
    assert load(path, env={"LLMMETER_WORKERS": " 4 "}).workers == 4
    assert load(path, env={"LLMMETER_PORT": ""}).port == 9090  # an empty variable is unset


@pytest.mark.parametrize(("text", "line", "words"), [
    ("[server]\nport = 0\n", 2, "port must be a whole number from 1 to 65535"),
    ("[server]\nworkers = 257\n", 2, "workers must be a whole number from 1 to 256"),
    ('[server]\nmetrics_token = "caf\u00e9-token"\n', 2, "metrics_token must be printable ASCII"),
    ('[server]\nmetrics_token = "a b"\n', 2, "without spaces"),
    ('[[tenant]]\nname = "all"\n', 2, "tenant name 'all' is reserved"),
    ('[[tenant]]\nname = "Other"\n', 2, "is reserved"),
    ('[[tenant]]\nname = "unauthenticated"\n', 2, "is reserved"),
    ('[[tag]]\nname = "other"\n', 2, "tag name 'other' is reserved"),
    (f'[[tenant]]\nname = "a"\nkey_sha256 = ["{"c" * 64}"]\n\n[[tenant]]\nname = "b"\nkey_sha256 = ["{"c" * 64}"]\n',
     7, "is also tenant 'a''s"),
    ("[[tier_alias]]\n", 1, "[[tier_alias]] needs 'from'"),
    ('[[tier_alias]]\nfrom = "turbo"\n', 1, "[[tier_alias]] needs 'to'"),
    ('[[tier_alias]]\nfrom = ""\nto = "highspeed"\n', 2, "from must be a non-empty string"),
    ('[[tier_alias]]\nfrom = "a"\nto = "fast lane"\n', 3, "tier 'fast lane' must be letters"),
    ('[[tier_alias]]\nfrom = "a"\nto = "b"\n[[tier_alias]]\nfrom = "A"\nto = "c"\n', 5,
     "duplicate tier alias from 'a'"),
    ('[[tenant]]\nname = "t\\n"\n', 2, "control characters"),
    ('[budget]\nmonthly_usd = "1e999999999"\n', 2, "monthly_usd must be a decimal from 0 to"),
    ("[server]\nread_timeout_s = nan\n", 2, "read_timeout_s must be a positive number"),
])
def test_config_that_would_break_serving_is_refused(tmp_path: Path, text: str, line: int, words: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load(path, env={})
    assert f"{path}:{line}: " in str(e.value) and words in str(e.value), str(e.value)


def test_one_key_listed_twice_by_one_tenant_is_not_a_clash(tmp_path: Path) -> None:
    key = "d" * 64
    s = load(write(tmp_path, f'[[tenant]]\nname = "a"\nkey_sha256 = ["{key}", "{key}"]\n'), env={})
    assert s.tenants[0].name == "a"


@pytest.mark.parametrize(("data", "words"), [
    (b"[server]\nport = 1\n\xff\xfe\n", ":3: not UTF-8 text"),
    (b"a = " + b"[" * 600 + b"]" * 600 + b"\n", ": arrays or tables nested too deeply"),
    (b"a = " + b"{b = " * 600 + b"1" + b"}" * 600 + b"\n", ": arrays or tables nested too deeply"),
    (b"[server]\nport = \n", ":2: not valid TOML"),
    (b"x = 0001-01-01T00:00:00+01:00\n", ":1: unknown section or key 'x'"),
])
def test_hostile_config_bytes_get_an_error_naming_the_file(tmp_path: Path, data: bytes, words: str) -> None:
    path = tmp_path / "llmmeter.toml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as e:
        load(path, env={})
    assert str(e.value).startswith(str(path)) and words in str(e.value), str(e.value)


def test_a_directory_as_config_is_a_clean_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"^{tmp_path}: cannot read config"):
        load(tmp_path, env={})


@pytest.mark.parametrize(("url", "shown", "secret"), [
    ("postgresql://bob:12/34@host/db", "postgresql://bob@host/db", "12/34"),
    ("postgresql://bob:hunter2@db.internal:5432/llmmeter", "postgresql://bob@db.internal:5432/llmmeter", "hunter2"),
    ("postgres://bob:hunter2@host/db", "postgres://bob@host/db", "hunter2"),
    ("postgresql+psycopg://bob:hunter2@[::1]:5432/db", "postgresql+psycopg://bob@[::1]:5432/db", "hunter2"),
    ("postgresql://bob@host/db?password=hunter2&sslmode=require", "postgresql://bob@host/db", "hunter2"),
    ("postgresql://bob:p@ss#w?rd@host/db", "postgresql://…", "ss#w"),
    ("postgresql://bob:hun@ter2@host/db", "postgresql://bob@host/db", "ter2"),
    ("postgresql://host/db?password=hun@ter2", "postgresql://…", "ter2"),
    ("postgresql:///db?host=/run/postgresql&password=hunter2", "postgresql:///db", "hunter2"),
    ("host=db.internal port=5432 user=bob password=hunter2 dbname=ledger",
     "host=db.internal port=5432 user=bob dbname=ledger", "hunter2"),
    ("host=db password = 'hun ter\\' 2' dbname=x", "host=db dbname=x", "hun"),
    ("host=db password hunter2", "host=db …", "hunter2"),
    ("bob:hunter2@host/db", "…", "hunter2"),
    ("sqlite:///data/llmmeter.db", "sqlite:///data/llmmeter.db", "\0"),
])
def test_redaction_hides_the_password_in_any_url_form(url: str, shown: str, secret: str) -> None:
    assert redact_url(url) == shown
    assert secret not in redact_url(url)


def test_tenant_name_rule_is_one() -> None:
    assert tenant_name_problem("search-team") is None
    for bad in ('x"; evil = "1', "x\n", "all", "", "-x", "a" * 65, "tëam"):
        assert tenant_name_problem(bad), bad


def test_a_keyword_value_connection_string_is_refused_without_echoing_it() -> None:
    dsn = "host=db.internal user=bob password=hunter2 dbname=ledger"
    with pytest.raises(ConfigError) as e:
        load(None, env={"LLMMETER_DB": dsn})
    assert str(e.value).startswith("variable LLMMETER_DB: url looks like a keyword/value")
    assert "hunter2" not in str(e.value)
    assert load(None, env={}, overrides={"db": "data/ledger.db"}).ledger_url == "data/ledger.db"


@pytest.mark.parametrize(("base_url", "expected"), [
    ("https://api.x.ai/v1", "from_total"),
    ("https://generativelanguage.googleapis.com/v1beta/openai", "from_total"),
    ("https://API.X.AI/v1", "from_total"),
    ("https://api.openai.com/v1", "flag"),
    ("https://api.x.ai.example.com/v1", "flag"),  # a look-alike host is not xAI
    ("http://127.0.0.1:8000/v1", "flag"),
])
def test_hidden_output_defaults_by_host(tmp_path: Path, base_url: str, expected: str) -> None:
    s = load(write(tmp_path, f'[[upstream]]\nname = "a"\nbase_url = "{base_url}"\n'), env={})
    assert s.upstreams[0].hidden_output == expected


def test_hidden_output_is_set_or_refused_by_name(tmp_path: Path) -> None:
    s = load(write(tmp_path, '[[upstream]]\nname = "a"\nbase_url = "https://api.x.ai/v1"\nhidden_output = "flag"\n'),
             env={})
    assert s.upstreams[0].hidden_output == "flag"
    with pytest.raises(ConfigError, match=r"llmmeter.toml:4: hidden_output must be one of from_total, flag"):
        load(write(tmp_path, '[[upstream]]\nname = "a"\nbase_url = "https://x/v1"\nhidden_output = "yes"\n'), env={})


def test_public_url_is_an_address_without_query(tmp_path: Path) -> None:
    s = load(write(tmp_path, '[server]\npublic_url = "https://llm.example.com/"\n'), env={})
    assert s.public_url == "https://llm.example.com"
    assert load(None, env={}).public_url is None
    for bad in ("llm.example.com", "https://x/?a=1", "ftp://x", "https://x/#f"):
        with pytest.raises(ConfigError, match="public_url must be an http"):
            load(write(tmp_path, f'[server]\npublic_url = "{bad}"\n'), env={})


def test_reconcile_sources_have_defaults_and_narrowing_ids(tmp_path: Path) -> None:
    s = load(None, env={})
    assert s.reconcile["openai"].base_url == "https://api.openai.com/v1"
    assert s.reconcile["anthropic"].admin_key_env == "ANTHROPIC_ADMIN_KEY"
    s = load(write(tmp_path, '[reconcile.openai]\nadmin_key_env = "ORG_ADMIN"\nproject_ids = ["proj_1"]\n'
                             'base_url = "http://127.0.0.1:9/v1/"\n'), env={})
    assert s.reconcile["openai"] == ReconcileSource("ORG_ADMIN", "http://127.0.0.1:9/v1", ("proj_1",))
    with pytest.raises(ConfigError, match=r"llmmeter.toml:2: unknown key 'admin_key' in \[reconcile.anthropic\]"):
        load(write(tmp_path, '[reconcile.anthropic]\nadmin_key = "sk-ant-admin"\n'), env={})
    with pytest.raises(ConfigError, match="not an environment variable name") as e:
        load(write(tmp_path, '[reconcile.openai]\nadmin_key_env = "sk-admin-123 secret"\n'), env={})
    assert "sk-admin" not in str(e.value)  # a key pasted in by mistake is not echoed


BUDGETS = '''
[[tenant]]
name = "search-team"

[[budget]]
name = "search-team-monthly"
tenant = "search-team"
period = "month"
tz = "America/Sao_Paulo"
limit_usd = "5000"
mode = "enforce"
alert_at_pct = [80, 50, 100]

[[budget]]
name = "all-daily"
limit_usd = "300"
period = "day"

[[model_limit]]
match = ["kimi-*"]
max_output = 16384
'''


def test_budgets_load_with_their_periods_modes_and_thresholds(tmp_path: Path) -> None:
    s = load(write(tmp_path, BUDGETS), env={})
    team, daily = s.budgets
    assert (team.name, team.tenant, team.tag, team.period, team.tz) == (
        "search-team-monthly", "search-team", None, "month", "America/Sao_Paulo")
    assert (team.limit_usd, team.enforced, team.alert_at_pct) == (Decimal(5000), True, (50, 80, 100))
    assert (daily.tenant, daily.period, daily.tz, daily.enforced) == (None, "day", "UTC", False)
    assert s.model_limits[0].match == ("kimi-*",) and s.model_limits[0].max_output == 16384
    assert s.monthly_budget_usd == 0  # the legacy [budget] table is not there


@pytest.mark.parametrize(("text", "line", "words"), [
    ('[[budget]]\nname = "b"\nlimit_usd = "1"\nperiod = "week"\n', 4, 'period must be "day" or "month"'),
    ('[[budget]]\nname = "b"\nlimit_usd = "1"\ntz = "Mars/Olympus"\n', 4, "is not a time zone name"),
    ('[[budget]]\nname = "b"\nlimit_usd = "1"\nmode = "block"\n', 4, 'mode must be "alert" or "enforce"'),
    ('[[budget]]\nname = "b"\nlimit_usd = 1.5\n', 3, "limit_usd must be a decimal string"),
    ('[[budget]]\nname = "b"\n', 1, "needs limit_usd"),
    ('[[budget]]\nname = "b"\nlimit_usd = "1"\nalert_at_pct = [0]\n', 4, "whole percentages"),
    ('[[budget]]\nname = "b"\nlimit_usd = "1"\ncap = "2"\n', 4, "unknown key 'cap' in [[budget]]"),
    ('[[tenant]]\nname = "a"\n\n[[budget]]\nname = "b"\nlimit_usd = "1"\ntenant = "z"\n', 7,
     "which no [[tenant]] defines"),
    ('[server]\nworkers = 2\n\n[[budget]]\nname = "b"\nlimit_usd = "1"\nmode = "enforce"\n', 2,
     "an enforced [[budget]] needs one process on a SQLite ledger"),
    ('[[budget]]\nname = "b"\nlimit_usd = "1"\ntag = "team a"\n', 4, "'team a' can never match a request"),
])
def test_budget_mistakes_are_refused_at_their_line(tmp_path: Path, text: str, line: int, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        load(write(tmp_path, text), env={})
    assert f"llmmeter.toml:{line}: " in str(e.value) and words in str(e.value), str(e.value)


def test_the_legacy_budget_table_still_works_and_cannot_mix_with_the_array(tmp_path: Path) -> None:
    s = load(write(tmp_path, '[budget]\nmonthly_usd = "100"\n'), env={})
    assert s.monthly_budget_usd == Decimal(100) and s.budgets == ()
    with pytest.raises(ConfigError, match=r"not valid TOML|Cannot|cannot"):
        load(write(tmp_path, '[budget]\nmonthly_usd = "100"\n\n[[budget]]\nname = "b"\nlimit_usd = "1"\n'), env={})


def test_several_workers_with_an_enforced_budget_are_fine_on_postgresql(tmp_path: Path) -> None:
    for scheme in ("postgresql", "postgres"):
        s = load(write(tmp_path, f'[server]\nworkers = 2\n\n[ledger]\nurl = "{scheme}://u@db/l"\n\n'
                                 '[[budget]]\nname = "b"\nlimit_usd = "1"\nmode = "enforce"\n'), env={})
        assert s.workers == 2 and s.budgets[0].enforced


def test_a_tenants_share_of_an_upstreams_connections(tmp_path: Path) -> None:
    upstreams = ('[[upstream]]\nname = "big"\nbase_url = "http://127.0.0.1:1/v1"\nmax_connections = 9\n'
                 '[[upstream]]\nname = "one"\nbase_url = "http://127.0.0.1:2/v1"\nmax_connections = 1\n'
                 'models = ["x-*"]\n')
    tenants = '[[tenant]]\nname = "a"\n'
    alone = load(write(tmp_path, upstreams), env={})
    assert [alone.tenant_share(u) for u in alone.upstreams] == [None, None]  # no tenant to share with
    halves = load(write(tmp_path, upstreams + tenants), env={})
    assert [halves.tenant_share(u) for u in halves.upstreams] == [4, 1]  # ÷ 2, never below one
    capped = load(write(tmp_path, "[server]\nmax_connections_per_tenant = 6\n" + upstreams + tenants), env={})
    assert [capped.tenant_share(u) for u in capped.upstreams] == [6, 1]  # never above max_connections
    with pytest.raises(ConfigError, match="max_connections_per_tenant"):
        load(write(tmp_path, "[server]\nmax_connections_per_tenant = 0\n" + upstreams), env={})


def test_metrics_bind_is_host_and_port(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    for value, expected in (("127.0.0.1:9464", ("127.0.0.1", 9464)), ("[::1]:9464", ("::1", 9464)),
                            ("localhost:1", ("localhost", 1))):
        cfg.write_text(f'[server]\nmetrics_bind = "{value}"\n')
        assert load(cfg, env={}).metrics_bind == expected
    assert load(cfg, env={"LLMMETER_METRICS_BIND": "127.0.0.2:9000"}).metrics_bind == ("127.0.0.2", 9000)
    for bad in ("9464", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:0", "::1:9464", "http://127.0.0.1:9464"):
        cfg.write_text(f'[server]\nmetrics_bind = "{bad}"\n')
        with pytest.raises(ConfigError, match=r"c\.toml:2: .*metrics_bind .*must be host:port"):
            load(cfg, env={})
    cfg.write_text('[server]\nport = 9464\nmetrics_bind = "127.0.0.1:9464"\n')
    with pytest.raises(ConfigError, match="a port of its own"):
        load(cfg, env={})
