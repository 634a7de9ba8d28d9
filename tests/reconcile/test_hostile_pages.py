"""What a provider (or whoever answers in its place) sends never leaks the admin key and never
crashes `reconcile`: a clear error naming the page and the field, exit 2. All against real
local HTTP servers: the fake provider, and a proxy that records whatever reaches it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from proxy.cli import main
from tests.reconcile.conftest import KEY, FakeProvider, fixture, seed, write_config
from tests.reconcile.records import openai_records

OPENAI_USAGE = "/v1/organization/usage/completions"
OPENAI_COSTS = "/v1/organization/costs"
ANTHROPIC_USAGE = "/v1/organizations/usage_report/messages"
ANTHROPIC_COSTS = "/v1/organizations/cost_report"
ROOT = Path(__file__).resolve().parents[2]
EMPTY = b'{"object": "page", "data": [], "has_more": false, "next_page": null}'


def run(capsys: pytest.CaptureFixture[str], cfg: Path, against: str) -> tuple[int, str, str]:
    code = main(["reconcile", "--month", "2026-11", "--against", against, "--config", str(cfg)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def cfg(tmp_path: Path, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> Path:
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    seed(db, openai_records())
    monkeypatch.setenv("TEST_OPENAI_ADMIN", KEY)
    monkeypatch.setenv("TEST_ANTHROPIC_ADMIN", KEY)
    return write_config(tmp_path / "llmmeter.toml", db, provider.url)


def test_a_long_plain_error_body_is_scrubbed_before_it_is_cut(cfg: Path, provider: FakeProvider,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    provider.status = 502
    provider.body = b"upstream said: " + b"x" * 172 + KEY.encode() + b" and more" * 40  # the key across byte 200
    code, out, err = run(capsys, cfg, "openai")
    assert code == 2 and out == "" and "HTTP 502" in err
    assert not any(KEY[i:i + 6] in err for i in range(len(KEY) - 5)), err
    assert "[redacted]" in err


class _Recorder(BaseHTTPRequestHandler):
    seen: list[str] = []  # noqa: RUF012 - one recorder per test, reset by the fixture

    def do_GET(self) -> None:
        _Recorder.seen.append(f"{self.path} {self.headers.get('authorization')}")
        self.send_response(502)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A proxy every http:// request would go through, by the environment urllib reads."""
    _Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, url)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    yield _Recorder.seen
    server.shutdown()
    server.server_close()


def run_command(cfg: Path) -> subprocess.CompletedProcess[str]:
    """In a process of its own: urllib reads the proxy variables when the command starts."""
    return subprocess.run([sys.executable, "-m", "proxy", "reconcile", "--month", "2026-11", "--against", "openai",
                           "--config", str(cfg)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120, cwd=cfg.parent)


def test_plain_http_goes_to_this_machine_only_never_through_a_proxy(
        cfg: Path, provider: FakeProvider, http_proxy: list[str]) -> None:
    provider.routes = {OPENAI_USAGE: [EMPTY], OPENAI_COSTS: [EMPTY]}
    proc = run_command(cfg)
    assert proc.returncode in (0, 1), proc.stderr
    assert http_proxy == []  # the key never went to the proxy in clear text
    assert provider.seen and all(s.headers["authorization"] == f"Bearer {KEY}" for s in provider.seen)


def test_plain_http_elsewhere_is_refused_proxy_or_not(tmp_path: Path, http_proxy: list[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    seed(db, [])
    monkeypatch.setenv("TEST_OPENAI_ADMIN", KEY)
    proc = run_command(write_config(tmp_path / "c.toml", db, "http://billing-mirror.example/v1"))
    assert proc.returncode == 2 and "only sent over https" in proc.stderr and http_proxy == []
    assert KEY not in proc.stderr


def _openai_usage(**result: object) -> bytes:
    return _page('"start_time": 1794182400, "end_time": 1794268800',
                 '{"object": "organization.usage.completions.result", "model": "gpt-4o", "service_tier": "default", '
                 + ", ".join(f'"{k}": {v}' for k, v in result.items()) + "}")


def _page(bucket_head: str, result: str) -> bytes:
    return (f'{{"object": "page", "has_more": false, "next_page": null, '
            f'"data": [{{"object": "bucket", {bucket_head}, "results": [{result}]}}]}}').encode()


OPENAI_COST = '{"object": "organization.costs.result", "amount": {"value": VALUE, "currency": "usd"}}'
ANTHROPIC_BUCKET = '"starting_at": "2026-11-10T00:00:00Z", "ending_at": "2026-11-11T00:00:00Z"'

HOSTILE = {
    "huge start_time": ("openai", OPENAI_USAGE, _page('"start_time": 100000000000000000000', "{}"), "start_time"),
    "negative start_time": ("openai", OPENAI_USAGE, _page('"start_time": -86400', "{}"), "start_time"),
    "start_time past year 9999": ("openai", OPENAI_USAGE, _page('"start_time": 253402300800', "{}"), "start_time"),
    "cached more than input": ("openai", OPENAI_USAGE,
                               _openai_usage(input_tokens=100, input_cached_tokens=500, output_tokens=1),
                               "input_cached_tokens"),
    "cache writes more than input": ("openai", OPENAI_USAGE,
                                     _openai_usage(input_tokens=100, input_cached_tokens=50,
                                                   input_cache_write_tokens=60), "input_cache_write_tokens"),
    "a token count past any month": ("openai", OPENAI_USAGE, _openai_usage(input_tokens=10**40), "input_tokens"),
    "1e999999999 dollars": ("openai", OPENAI_COSTS,
                            _page('"start_time": 1794182400', OPENAI_COST.replace("VALUE", "1e999999999")),
                            "amount"),
    "dollars to 1e-999999999": ("openai", OPENAI_COSTS,
                                _page('"start_time": 1794182400', OPENAI_COST.replace("VALUE", "1e-999999999")),
                                "amount"),
    "anthropic 1e999999999 cents": ("anthropic", ANTHROPIC_COSTS,
                                    _page(ANTHROPIC_BUCKET, '{"amount": "1e999999999", "currency": "USD", '
                                                            '"cost_type": "tokens", "model": "claude-x"}'), "amount"),
    "anthropic starting_at at year 1": ("anthropic", ANTHROPIC_USAGE,
                                        _page('"starting_at": "0001-01-01T00:00:00+01:00"', "{}"), "starting_at"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_page_is_a_clear_error_naming_page_and_field(cfg: Path, provider: FakeProvider,
                                                               capsys: pytest.CaptureFixture[str], case: str) -> None:
    source, path, page, field = HOSTILE[case]
    if source == "openai":
        provider.routes = {OPENAI_USAGE: [EMPTY], OPENAI_COSTS: [EMPTY], path: [page]}
    else:
        provider.routes = {ANTHROPIC_USAGE: [EMPTY], ANTHROPIC_COSTS: [EMPTY], path: [page]}
    code, out, err = run(capsys, cfg, source)
    assert code == 2 and out == "", err
    assert field in err and f"{path.removeprefix('/v1')} page 1" in err, err
    assert "Traceback" not in err


def test_a_hostile_saved_page_names_its_file(tmp_path: Path, cfg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "usage-nov.json").write_bytes(fixture("openai_usage_page1.json").replace(b"1793664000", b"-1", 1))
    code, out, err = run(capsys, cfg, str(saved))
    assert code == 2 and out == "" and "usage-nov.json" in err and "start_time" in err, err
