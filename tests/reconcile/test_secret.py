"""The admin key is sent, and never printed, logged or written: run the real command and look everywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.reconcile.conftest import KEY, FakeProvider, fixture, seed, write_config
from tests.reconcile.records import openai_records

ROOT = Path(__file__).resolve().parents[2]


def test_key_never_in_output_or_files(tmp_path: Path, provider: FakeProvider) -> None:
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    seed(db, openai_records())
    provider.routes = {"/v1/organization/usage/completions": [fixture("openai_usage_page1.json"),
                                                              fixture("openai_usage_page2.json")],
                       "/v1/organization/costs": [fixture("openai_costs.json")]}
    cfg = write_config(tmp_path / "llmmeter.toml", db, provider.url)
    env = {**os.environ, "TEST_OPENAI_ADMIN": KEY, "PYTHONPATH": str(ROOT)}
    outputs = []
    for fmt in ("md", "json", "csv"):
        out = tmp_path / f"reconcile.{fmt}"
        for extra in ([], ["--out", str(out)]):
            proc = subprocess.run([sys.executable, "-m", "proxy", "reconcile", "--month", "2026-11",
                                   "--against", "openai", "--config", str(cfg), "--format", fmt, *extra],
                                  env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
            assert proc.returncode == 1, proc.stderr
            outputs += [proc.stdout, proc.stderr]
        assert out.stat().st_size > 0
    provider.status, provider.body = 401, json.dumps({"error": {"message": f"bad key {KEY}"}}).encode()
    proc = subprocess.run([sys.executable, "-m", "proxy", "reconcile", "--month", "2026-11", "--against", "openai",
                           "--config", str(cfg)], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and "HTTP 401" in proc.stderr
    outputs += [proc.stdout, proc.stderr]
    assert all(KEY not in text for text in outputs)
    secret = KEY.encode()
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert secret not in f.read_bytes(), f
    # It was sent, as the provider wants it, and only in the header.
    assert provider.seen and all(s.headers["authorization"] == f"Bearer {KEY}" for s in provider.seen)
    assert all(KEY not in v for s in provider.seen for _, v in s.query)
