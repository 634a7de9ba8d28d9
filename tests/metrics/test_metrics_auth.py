"""/metrics does not hand one tenant's spend to anyone (SPEC "Version 4 additions" → "Metrics
auth"): with [[tenant]] keys, it needs server.metrics_token unless llmmeter listens on a loopback
address only, and `serve` refuses to start otherwise, saying which setting to add."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.errors import ConfigError
from proxy.metrics.exposure import check_metrics_exposure
from proxy.settings import Settings, Tenant
from tests.fake_upstream import FakeUpstream
from tests.serve import free_port

ROOT = Path(__file__).resolve().parents[2]
TENANT = f'[[tenant]]\nname = "search-team"\nkey_sha256 = ["{hashlib.sha256(b"sk-proxy-1").hexdigest()}"]\n'


def serve_until_exit(tmp_path: Path, config: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`llmmeter serve` expected to refuse before it listens (so nothing is bound off this machine)."""
    cfg = tmp_path / "llmmeter.toml"
    cfg.write_text(config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMMETER_")}
    return subprocess.run([sys.executable, "-m", "proxy", "serve", "--config", str(cfg), "--port", str(free_port()),
                           "--db", f"sqlite:///{tmp_path / 'ledger.db'}", "--upstream", "http://127.0.0.1:9/v1",
                           *args], env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "llmmeter.internal"])
def test_serve_refuses_tenants_metrics_open_off_loopback(tmp_path: Path, host: str) -> None:
    proc = serve_until_exit(tmp_path, f'[server]\nhost = "{host}"\n\n' + TENANT)
    assert proc.returncode == 2, proc.stderr
    assert "server.metrics_token" in proc.stderr and "LLMMETER_METRICS_TOKEN" in proc.stderr
    assert "127.0.0.1" in proc.stderr  # the other way out: listen on loopback only
    assert not list(tmp_path.glob("**/journal*/*"))  # refused before anything started


def test_the_host_flag_is_checked_too(tmp_path: Path) -> None:
    proc = serve_until_exit(tmp_path, TENANT, "--host", "0.0.0.0")
    assert proc.returncode == 2 and "server.metrics_token" in proc.stderr, proc.stderr


@pytest.mark.parametrize(("settings", "allowed"), [
    (Settings(host="0.0.0.0", tenants=(Tenant("a", ("ab" * 32,)),)), False),
    (Settings(host="0.0.0.0", tenants=(Tenant("a", ("ab" * 32,)),), metrics_token="t0k3n"), True),
    (Settings(host="127.0.0.1", tenants=(Tenant("a", ("ab" * 32,)),)), True),
    (Settings(host="127.0.0.2", tenants=(Tenant("a", ("ab" * 32,)),)), True),
    (Settings(host="::1", tenants=(Tenant("a", ("ab" * 32,)),)), True),
    (Settings(host="localhost", tenants=(Tenant("a", ("ab" * 32,)),)), True),
    (Settings(host="0.0.0.0"), True),  # no tenants: today's default, /metrics open
    (Settings(host="0.0.0.0", tenants=(Tenant("a"),)), True),  # tenants without keys: no one is kept apart
    # /metrics on a listener of its own: its address decides, not the one /v1 is served on.
    (Settings(host="0.0.0.0", tenants=(Tenant("a", ("ab" * 32,)),), metrics_bind=("127.0.0.1", 9464)), True),
    (Settings(host="0.0.0.0", tenants=(Tenant("a", ("ab" * 32,)),), metrics_bind=("::1", 9464)), True),
    (Settings(host="127.0.0.1", tenants=(Tenant("a", ("ab" * 32,)),), metrics_bind=("0.0.0.0", 9464)), False),
    (Settings(host="127.0.0.1", tenants=(Tenant("a", ("ab" * 32,)),), metrics_bind=("0.0.0.0", 9464),
              metrics_token="t0k3n"), True),
])
def test_which_settings_may_serve_metrics(settings: Settings, allowed: bool) -> None:
    if allowed:
        check_metrics_exposure(settings)
    else:
        with pytest.raises(ConfigError, match=r"server\.metrics_token"):
            check_metrics_exposure(settings)


def test_with_tenants_and_a_token_metrics_needs_it(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url, config='[server]\nmetrics_token = "mt-1"\n\n' + TENANT)
    assert httpx.get(proxy.url + "/metrics").status_code == 401
    ok = httpx.get(proxy.url + "/metrics", headers={"authorization": "Bearer mt-1"})
    assert ok.status_code == 200 and "llmmeter_requests_total" in ok.text


def test_metrics_bind_refused_off_loopback_without_a_token(tmp_path: Path) -> None:
    proc = serve_until_exit(tmp_path, '[server]\nmetrics_bind = "0.0.0.0:9464"\n\n' + TENANT)
    assert proc.returncode == 2 and "server.metrics_bind listens on 0.0.0.0" in proc.stderr, proc.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_metrics_bind_serves_metrics_there_and_only_there(fake: FakeUpstream, serve: Any, workers: str) -> None:
    port = free_port()
    proxy = serve(upstream=fake.base_url, args=("--workers", workers),
                  config=f'[server]\nmetrics_bind = "127.0.0.1:{port}"\n\n' + TENANT)
    assert f"/metrics on http://127.0.0.1:{port}/metrics only" in proxy.output()
    r = httpx.post(proxy.base_url + "/chat/completions", headers={"authorization": "Bearer sk-proxy-1"},
                   json={"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
    assert r.status_code == 200, r.text
    # The port clients reach no longer shows anyone's spend...
    moved = httpx.get(proxy.url + "/metrics")
    assert moved.status_code == 404 and moved.json()["error"]["code"] == "metrics_elsewhere"
    assert "llmmeter_requests_total" not in moved.text
    # ...the metrics port does (every worker's answer sums all workers' files), and serves no /v1.
    metrics_url = f"http://127.0.0.1:{port}"
    for _ in range(4):  # new connections: with two workers either may answer
        text = httpx.get(metrics_url + "/metrics").text
        assert 'llmmeter_requests_total{' in text and 'tenant="search-team"' in text
    assert httpx.get(metrics_url + "/healthz").status_code == 200
    relayed = httpx.post(metrics_url + "/v1/chat/completions", headers={"authorization": "Bearer sk-proxy-1"},
                         json={"model": "kimi-k3.1-pro", "messages": []})
    assert relayed.status_code == 404 and len(fake.requests) == 1


def test_metrics_bind_on_a_taken_port_stops_serve_with_the_reason(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = serve_until_exit(tmp_path, f'[server]\nmetrics_bind = "127.0.0.1:{port}"\n')
    assert proc.returncode != 0
    assert f"server.metrics_bind 127.0.0.1:{port}" in proc.stderr, proc.stderr
