"""Fuzzing the config and price-table loaders: whatever the bytes, a valid document loads
and anything else is an LLMMeterError whose message says where (file, and line where there
is one) — never another exception, never a traceback for the operator."""

from __future__ import annotations

import json
import math
import re
import tempfile
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pricing import PriceTableError, check_dir, load_dir
from proxy.errors import ConfigError, LLMMeterError
from proxy.settings import _ARRAYS, _SCHEMA, RESERVED_TENANTS, load

RARELY = st.sampled_from([False] * 9 + [True])  # sampled_from shrinks towards the first
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- a small TOML writer: enough to turn generated values into documents ---------------------


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):  # JSON's escapes are all TOML basic-string escapes; TOML also refuses a raw DEL
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, TomlTime):
        return v.text
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k, ensure_ascii=False)


class TomlTime:
    """A TOML date or time written as text, so offsets and years at datetime's limits stay literal."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def document(tables: dict[str, dict[str, Any]], arrays: dict[str, list[dict[str, Any]]]) -> str:
    out: list[str] = []
    for name, body in tables.items():
        out.append(f"[{toml_key(name)}]")
        out += [f"{toml_key(k)} = {toml_value(v)}" for k, v in body.items()]
        out.append("")
    for name, items in arrays.items():
        for body in items:
            out.append(f"[[{toml_key(name)}]]")
            out += [f"{toml_key(k)} = {toml_value(v)}" for k, v in body.items()]
            out.append("")
    return "\n".join(out)


# --- strategies ------------------------------------------------------------------------------

text_chars = st.characters(blacklist_categories=("Cs",))  # lone surrogates cannot be UTF-8
offsets = st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59).map(
    lambda m: "Z" if m == 0 else f"{'+' if m > 0 else '-'}{abs(m) // 60:02d}:{abs(m) % 60:02d}")
toml_times = st.one_of(
    st.builds(lambda d, off: TomlTime(f"{d:%Y-%m-%dT%H:%M:%S}".rjust(19, "0") + off),
              st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)), offsets),
    st.dates().map(lambda d: TomlTime(d.isoformat().rjust(10, "0"))),
    st.datetimes().map(lambda d: TomlTime(d.isoformat().rjust(19, "0"))),
    st.times().map(lambda t: TomlTime(t.isoformat())),
)
scalars = st.one_of(
    st.booleans(), st.integers(), st.integers(min_value=-5, max_value=70000), st.floats(),
    st.text(text_chars, max_size=20), st.sampled_from(["", "0", "1", "nan", "-1", "1e999999999", "all", "other",
                                                       "http://x", "https://h/v1", "a\nb", "\x00", "é"]),
    toml_times,
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(text_chars, min_size=1, max_size=6), inner, max_size=3)),
    max_leaves=8)


@st.composite
def config_docs(draw: st.DrawFn) -> str:
    """Known sections and keys with values of any type: past the parser, into every check."""
    tables = {name: draw(st.dictionaries(st.sampled_from(sorted(keys)), values, max_size=4))
              for name, keys in _SCHEMA.items() if draw(st.booleans())}
    arrays = {name: draw(st.lists(st.dictionaries(st.sampled_from(sorted(keys)), values, max_size=4), max_size=3))
              for name, keys in _ARRAYS.items() if draw(st.booleans())}
    if draw(RARELY):  # now and then a key no schema has
        tables[draw(st.text(text_chars, min_size=1, max_size=8))] = {"x": 1}
    return document(tables, arrays)


names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,20}", fullmatch=True)
tenant_names = names.filter(lambda n: n.lower() not in RESERVED_TENANTS)


@st.composite
def valid_configs(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    port = draw(st.integers(1, 65535))
    workers = draw(st.integers(1, 256))
    timeout = draw(st.floats(min_value=0.001, max_value=10**7, allow_nan=False) | st.integers(1, 10**7))
    tenants = draw(st.lists(tenant_names, max_size=4, unique=True))
    keys = draw(st.lists(st.from_regex(r"[0-9a-f]{64}", fullmatch=True), min_size=len(tenants),
                         max_size=len(tenants), unique=True))
    token = draw(st.from_regex(r"[!-~]{1,40}", fullmatch=True))
    text = document(
        {"server": {"port": port, "workers": workers, "read_timeout_s": timeout, "metrics_token": token}},
        {"tenant": [{"name": n, "key_sha256": [k]} for n, k in zip(tenants, keys, strict=True)],
         "tier_alias": [{"from": "turbo", "to": "highspeed"}]})
    return text, {"port": port, "workers": workers, "read_timeout_s": float(timeout), "tenants": tenants}


def assert_located(e: LLMMeterError, path: Path) -> None:
    for line in str(e).splitlines():
        assert re.match(rf"{re.escape(str(path))}(:\d+)?: \S", line), str(e)


def load_file(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "llmmeter.toml"
        path.write_bytes(data)
        try:
            load(path, env={})
        except ConfigError as e:
            assert_located(e, path)


# --- config -----------------------------------------------------------------------------------


@FUZZ
@given(config_docs())
@example("[server]\nread_timeout_s = nan\n")
@example('[[tenant]]\nname = "all"\n')
@example("[[tier_alias]]\n")
@example("a = " + "[" * 600 + "]" * 600)
@example("[server]\nport = 0001-01-01T00:00:00+01:00\n")
def test_any_config_document_loads_or_says_where_it_is_wrong(text: str) -> None:
    load_file(text.encode())


@FUZZ
@given(st.text(text_chars, max_size=300) | st.text(st.sampled_from('[]{}="\'.,#\n abc123-_:'), max_size=300))
def test_any_config_text_loads_or_says_where_it_is_wrong(text: str) -> None:
    load_file(text.encode())


@FUZZ
@given(st.binary(max_size=300))
@example(b"\xff\xfe[server]\n")
@example(b"[server]\nport = 1\n\x00")
def test_any_config_bytes_load_or_say_where_they_are_wrong(data: bytes) -> None:
    load_file(data)


@FUZZ
@given(valid_configs())
def test_valid_configs_load_with_their_values(case: tuple[str, dict[str, Any]]) -> None:
    text, want = case
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "llmmeter.toml"
        path.write_text(text)
        s = load(path, env={})
    assert (s.port, s.workers, s.read_timeout_s) == (want["port"], want["workers"], want["read_timeout_s"])
    assert [t.name for t in s.tenants] == want["tenants"]


ENV_NAMES = ["LLMMETER_HOST", "LLMMETER_PORT", "LLMMETER_WORKERS", "LLMMETER_METRICS_TOKEN", "LLMMETER_DB",
             "LLMMETER_PRICES", "LLMMETER_UPSTREAM", "LLMMETER_UPSTREAM_API_KEY"]


@FUZZ
@given(st.dictionaries(st.sampled_from(ENV_NAMES), st.text(text_chars, max_size=12), max_size=4),
       st.dictionaries(st.sampled_from(["host", "port", "workers", "db", "prices", "upstream"]),
                       st.integers(-10, 70000) | st.text(text_chars, max_size=12), max_size=3))
def test_variables_and_flags_load_or_name_the_one_that_is_wrong(env: dict[str, str],
                                                                 flags: dict[str, object]) -> None:
    try:
        load(None, env=env, overrides=flags)
    except ConfigError as e:
        for line in str(e).splitlines():
            assert re.match(r"(variable LLMMETER_[A-Z_]+|flag --[a-z-]+): \S", line), str(e)


# --- price tables -------------------------------------------------------------------------------

REQUIRED_PRICE_KEYS = ["model", "tier", "effective_from", "input", "output", "cache_read", "cache_write", "source"]


@st.composite
def price_docs(draw: st.DrawFn) -> str:
    """[[price]] entries whose known keys hold values of any type, sometimes the right one."""
    good: dict[str, st.SearchStrategy[Any]] = {
        "model": names, "tier": st.sampled_from(["standard", "highspeed"]), "source": st.just("s"),
        "effective_from": toml_times, "match": st.lists(names, min_size=1, max_size=2),
        "upstream": names, "currency": st.sampled_from(["USD", "EUR"]),
        **{k: st.decimals(min_value=0, max_value=10**6, places=4, allow_nan=False).map(str)
           for k in ("input", "output", "cache_read", "cache_write")},
    }
    if draw(RARELY):
        return draw(st.sampled_from(["price = [1, 2]\n", "price = 1\n", 'price = ["a"]\n', "[price]\nx = 1\n",
                                     "other = 1\n", 'price = [{model = "m"}]\n']))
    entries = []
    for _ in range(draw(st.integers(0, 3))):
        keys = [k for k in REQUIRED_PRICE_KEYS if not draw(RARELY)]
        keys += draw(st.lists(st.sampled_from(["match", "upstream", "currency"]), unique=True))
        entries.append({k: draw(values) if draw(RARELY) else draw(good[k]) for k in keys})
    return document({}, {"price": entries})


def check_tables(files: dict[str, bytes], dirs: tuple[str, ...] = ()) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        for name, data in files.items():
            (root / name).write_bytes(data)
        for name in dirs:
            (root / name).mkdir()
        for error in check_dir(root):
            assert re.match(rf"{re.escape(str(root))}/[^/:]+\.toml(:\d+)?: \S", error), error
        try:
            load_dir(root)
        except PriceTableError as e:
            assert isinstance(e, LLMMeterError) and e.errors


@FUZZ
@given(price_docs())
@example('[[price]]\nmodel = "m"\ntier = "standard"\neffective_from = 0001-01-01T00:00:00+01:00\n'
         'input = "1"\noutput = "1"\ncache_read = "1"\ncache_write = "1"\nsource = "s"\n')
@example("price = [1,2]\n")
@example("price = " + "[" * 600 + "]" * 600)
def test_any_price_table_loads_or_says_where_it_is_wrong(text: str) -> None:
    check_tables({"t.toml": text.encode()})


@FUZZ
@given(st.binary(max_size=300) | st.text(text_chars, max_size=300).map(str.encode))
def test_any_price_table_bytes_load_or_say_where_they_are_wrong(data: bytes) -> None:
    check_tables({"t.toml": data})


def test_a_directory_named_like_a_table_is_an_error_naming_it() -> None:
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "x.toml").mkdir()
        errors = check_dir(d)
    assert errors == [f"{Path(d) / 'x.toml'}: not a file: a price table is a *.toml file"]


@FUZZ
@given(st.lists(st.tuples(names, st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(9998, 1, 1)),
                          st.decimals(min_value=0, max_value=10**4, places=4, allow_nan=False)),
                min_size=1, max_size=5, unique_by=lambda t: t[0].lower()))
def test_valid_price_tables_load_exactly(entries: list[tuple[str, datetime, Decimal]]) -> None:
    text = "\n".join(
        f'[[price]]\nmodel = "{m}"\ntier = "standard"\neffective_from = {t:%Y-%m-%dT%H:%M:%S}Z\n'
        f'input = "{p}"\noutput = "{p}"\ncache_read = "{p}"\ncache_write = "{p}"\nsource = "s"\n'
        for m, t, p in entries)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "t.toml").write_text(text)
        prices = load_dir(d)
    assert [(p.model, p.input, p.effective_from.replace(tzinfo=None)) for p in prices] == \
        [(m, p, t.replace(microsecond=0)) for m, t, p in entries]


def test_helpers_write_what_tomllib_reads() -> None:
    import tomllib

    doc = document({"a": {"s": "x\"\n\\é", "f": 1.5, "l": [1, "2"], "d": {"k y": True}}}, {})
    assert tomllib.loads(doc) == {"a": {"s": "x\"\n\\é", "f": 1.5, "l": [1, "2"], "d": {"k y": True}}}
    assert tomllib.loads("t = " + toml_value(TomlTime("0001-01-01T00:00:00+01:00")))["t"].year == 1
