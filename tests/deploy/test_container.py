"""The Dockerfile built by podman and run: health, exact metering, a non-root process, a ledger
that outlives its container.

The container shares the host's network, so it reaches the fake upstream on 127.0.0.1. Its
price tables are the ones shipped in the image; the expected dollars are computed here from
kimi-k3.1-pro's standard prices in pricing/tables/kimi.toml.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy import podman
from tests.deploy.conftest import Container
from tests.fake_upstream import FakeUpstream
from tests.serve import free_port

pytestmark = pytest.mark.timeout(900)  # the first test builds the image: debootstrap and pip

MODEL = "kimi-k3.1-pro"
USAGE = {"prompt": 1200, "cached": 1000, "completion": 50}  # Moonshot: 200 fresh + 1000 cached
TOKENS = {"input_tokens": 200, "cache_read_tokens": 1000, "cache_write_tokens": 0, "output_tokens": 50}
USD = (200 * Decimal("2.00") + 1000 * Decimal("0.20") + 50 * Decimal("10.00")) / 10**6

Start = Callable[[str, str], Container]


def chat(c: Container, stream: bool = False) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "stream": stream}
    headers = {"authorization": "Bearer sk-client", "x-fake-usage": json.dumps(USAGE)}
    r = httpx.post(c.url + "/v1/chat/completions", json=body, headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    assert "tok0" in r.text and ('data: [DONE]' in r.text) is stream


def metric(c: Container, name: str, **labels: str) -> float:
    text = httpx.get(c.url + "/metrics", timeout=5).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_image_runs_ready_as_a_non_root_user(container: Start, volume: str, fake: FakeUpstream,
                                             image: str) -> None:
    c = container(volume, fake.base_url)
    assert httpx.get(c.url + "/healthz", timeout=5).json() == {"status": "ok"}
    ready = httpx.get(c.url + "/readyz", timeout=5).json()
    assert ready["ready"] and ready["ledger_writable"] and ready["price_tables_loaded"]
    assert podman.run("image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip() == "10001:10001"
    status = dict(line.split(":", 1) for line in c.exec("cat", "/proc/1/status").splitlines())
    assert status["Uid"].split() == ["10001"] * 4 and status["Gid"].split() == ["10001"] * 4
    assert c.exec("id", "-un").strip() == "llmmeter" and c.exec("id", "-gn").strip() == "llmmeter"
    assert c.exec("stat", "-c", "%u:%g", "/data/llmmeter.db").strip() == "10001:10001"
    # The Dockerfile's HEALTHCHECK, run inside the container as podman would run it.
    assert podman.run("healthcheck", "run", c.name, check=False).returncode == 0, c.logs()


def test_a_proxied_call_is_metered_exactly(container: Start, volume: str, fake: FakeUpstream) -> None:
    c = container(volume, fake.base_url)
    chat(c)
    chat(c, stream=True)
    rows = c.ledger(expect=2)
    assert len(rows) == 2 and sorted(r["stream"] for r in rows) == [False, True]
    for row in rows:
        assert {k: row[k] for k in TOKENS} == TOKENS
        assert Decimal(row["cost_usd"]) == USD
        assert (row["model"], row["tier"], row["usage_source"], row["outcome"]) == (MODEL, "standard",
                                                                                     "upstream", "ok")
    for kind, n in (("input", 200), ("cache_read", 1000), ("output", 50)):
        assert metric(c, "llmmeter_tokens_total", model=MODEL, type=kind) == 2 * n
    assert metric(c, "llmmeter_cost_usd_total", model=MODEL) == pytest.approx(float(2 * USD), rel=1e-12)
    assert metric(c, "llmmeter_requests_total", model=MODEL, code="200", outcome="ok") == 2


def test_the_ledger_on_its_volume_outlives_the_container(container: Start, volume: str,
                                                         fake: FakeUpstream) -> None:
    first = container(volume, fake.base_url)
    chat(first)
    assert len(first.ledger(expect=1)) == 1
    first.stop()
    first.remove()
    second = container(volume, fake.base_url)
    [row] = second.ledger(expect=1)
    assert Decimal(row["cost_usd"]) == USD
    chat(second)
    assert len(second.ledger(expect=2)) == 2
    assert metric(second, "llmmeter_requests_total", model=MODEL) == 1  # metrics are per process


def test_an_estimate_counts_inside_the_container(container: Start, volume: str, fake: FakeUpstream) -> None:
    """The non-root user has no home: tiktoken's vocabulary is unpacked under /data instead."""
    c = container(volume, fake.base_url)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}]}
    r = httpx.post(c.url + "/v1/chat/completions", json=body, timeout=30,
                   headers={"authorization": "Bearer sk-client", "x-fake-no-usage": "1"})
    assert r.status_code == 200, r.text
    [row] = c.ledger(expect=1)
    assert row["usage_source"] == "estimated" and row["input_tokens"] > 0
    assert "estimate_counter_failed" not in (row.get("flags") or "")


def test_the_image_defaults_are_a_config_file_not_the_environment(image: str) -> None:
    """Environment beats the config file: the image sets no LLMMETER_* variable, so a mounted
    config's [server] and [ledger] are in force. Its defaults are /app/llmmeter.toml."""
    env = podman.run("image", "inspect", "--format", "{{json .Config.Env}}", image).stdout
    assert "LLMMETER_" not in env, env
    probe = ("from proxy import settings as s; c = s.load(s.default_config_path()); "
             "print(c.config_file, c.host, c.port, c.ledger_url)")
    out = podman.run("run", "--rm", "--network=none", "--entrypoint", "python", image, "-c", probe).stdout
    assert out.split() == ["llmmeter.toml", "0.0.0.0", "8080", "sqlite:////data/llmmeter.db"]
    # A mounted config without [ledger] url gets the built-in relative default, still on the volume.
    where = podman.run("run", "--rm", "--network=none", "--entrypoint", "readlink", image, "-f", "data/llmmeter.db")
    assert where.stdout.strip() == "/data/llmmeter.db"


def test_a_mounted_config_is_the_one_in_force(image: str, volume: str, fake: FakeUpstream,
                                              containers: list[Container], tmp_path: Path) -> None:
    """docs/deploy-container.md: llmmeter.toml mounted at /app/llmmeter.toml, the variables its
    api_key_env names passed in an env file. Its port, ledger and upstream key are the ones used."""
    c = Container(f"llmmeter-test-{uuid.uuid4().hex[:8]}", free_port())
    conf = tmp_path / "llmmeter.toml"
    conf.write_text(f'[server]\nhost = "127.0.0.1"\nport = {c.port}\n\n'
                    '[ledger]\nurl = "sqlite:////data/from-config.db"\n\n'
                    f'[[upstream]]\nname = "moonshot"\nbase_url = "{fake.base_url}"\n'
                    'api_key_env = "MOONSHOT_API_KEY"\n')
    secrets = tmp_path / "llmmeter.env"
    secrets.write_text("MOONSHOT_API_KEY=sk-from-the-env-file\n")
    containers.append(c)
    c.run(image, volume, "-v", f"{conf}:/app/llmmeter.toml:ro", "--env-file", str(secrets))
    chat(c)
    [row] = c.ledger(expect=1)
    assert Decimal(row["cost_usd"]) == USD
    assert fake.requests[-1]["headers"]["authorization"] == "Bearer sk-from-the-env-file"
    assert c.exec("ls", "/data").split().count("from-config.db") == 1
    assert "llmmeter.db" not in c.exec("ls", "/data").split()
    assert f"listening on http://127.0.0.1:{c.port}" in c.logs()
    assert "ledger sqlite:////data/from-config.db" in c.logs()
    # The HEALTHCHECK asks the port the config sets.
    assert podman.run("healthcheck", "run", c.name, check=False).returncode == 0, c.logs()
