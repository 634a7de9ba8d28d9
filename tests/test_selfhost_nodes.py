"""[[selfhost.node]] tables: every figure with its source, unknown keys refused, and the
configured tables replace the shipped profiles."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from proxy.errors import ConfigError
from proxy.report.nodes import SHIPPED, profiles
from proxy.settings import load

NODE = """
[[selfhost.node]]
name = "rented-8xb300"
accelerators = "8x NVIDIA B300"
accelerators_source = "vendor claim: the provider's offer"
rent_usd_per_month = "98000.50"
rent_usd_per_month_source = "vendor claim: quote of 2026-11-20"
power_kw = "14.3"
power_kw_source = "measured: our rack's meter"
kv_cache_tokens = 2600000
kv_cache_tokens_source = "vendor claim: vLLM recipe, FP8 KV"
prefill_tokens_per_s = 40000
prefill_tokens_per_s_source = "assumption: our own benchmark plan"
decode_tokens_per_s = 9000
decode_tokens_per_s_source = "assumption: half the vendor's aggregate"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llmmeter.toml"
    path.write_text(text)
    return path


def test_a_configured_node_replaces_the_shipped_profiles(tmp_path: Path) -> None:
    sh = load(write(tmp_path, "[selfhost]\nnodes = 3\n" + NODE), env={}).selfhost
    assert sh.nodes == 3 and "node" not in sh.overridden
    [p] = profiles(sh)
    assert (p.name, p.rent_usd_per_month, p.capex_usd, p.power_kw, p.kv_cache_tokens) == (
        "rented-8xb300", Decimal("98000.50"), None, Decimal("14.3"), 2_600_000)
    assert p.source("power_kw") == "measured: our rack's meter"
    assert profiles(load(None, env={}).selfhost) == SHIPPED
    assert all(p.source(f) for p in SHIPPED for f, _ in p.sources)


@pytest.mark.parametrize(("change", "words"), [
    (("decode_tokens_per_s = 9000", "decode_tokens_per_s = 9000\nhbm_gb = 288"),
     "unknown key 'hbm_gb' in [[selfhost.node]]"),
    (('kv_cache_tokens_source = "vendor claim: vLLM recipe, FP8 KV"\n', ""),
     "'rented-8xb300' needs kv_cache_tokens_source"),
    (('rent_usd_per_month = "98000.50"\nrent_usd_per_month_source = "vendor claim: quote of 2026-11-20"\n', ""),
     "needs capex_usd or rent_usd_per_month"),
    (("prefill_tokens_per_s = 40000", "prefill_tokens_per_s = 0"), "prefill_tokens_per_s must be a whole number"),
    (('power_kw = "14.3"\n', ""), "power_kw_source is set but power_kw is not"),
])
def test_a_bad_node_table_is_refused_with_its_reason(tmp_path: Path, change: tuple[str, str], words: str) -> None:
    text = NODE.replace(*change)
    assert text != NODE
    with pytest.raises(ConfigError) as e:
        load(write(tmp_path, text), env={})
    assert words in str(e.value)
    assert "llmmeter.toml:" in str(e.value)


def test_equivalents_are_configured_per_model_and_checked(tmp_path: Path) -> None:
    text = ('[[selfhost.equivalent]]\nmodel = "kimi-k3.1-pro"\n'
            'provider_models = ["together:moonshotai/Kimi-K3.1-Pro", "novita:moonshotai/kimi-k3.1-pro"]\n')
    sh = load(write(tmp_path, text), env={}).selfhost
    assert sh.equivalents == (("kimi-k3.1-pro", ("together:moonshotai/Kimi-K3.1-Pro",
                                                 "novita:moonshotai/kimi-k3.1-pro")),)
    assert load(None, env={}).selfhost.equivalents == ()  # none configured: the shipped ones apply
    for bad, words in (('provider_models = ["moonshotai/Kimi-K3.1-Pro"]', "is not provider_id:model"),
                       ("provider_models = []", "non-empty list"),
                       ('provider_models = ["together:x"]\nurl = "y"', "unknown key 'url'")):
        with pytest.raises(ConfigError, match=rf"llmmeter\.toml:\d+: .*{words}"):
            load(write(tmp_path, f'[[selfhost.equivalent]]\nmodel = "m"\n{bad}\n'), env={})
    with pytest.raises(ConfigError, match="two"):
        load(write(tmp_path, text + text), env={})
