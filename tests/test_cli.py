"""The command line as a user runs it: `python -m proxy ...` in a subprocess."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from proxy.settings import load
from tests.pricing.test_loader import GOOD


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd)


def test_prices_check_accepts_the_shipped_tables() -> None:
    r = run("prices", "check")
    assert r.returncode == 0, r.stderr
    assert "price entries, all valid" in r.stdout


def test_prices_check_reports_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text(GOOD.replace('output = "10.00"', "output = 10.0"))
    r = run("prices", "check", str(tmp_path))
    assert r.returncode == 1
    assert f"{tmp_path / 'bad.toml'}:7: output must be a decimal string" in r.stderr


def test_prices_show_prints_the_entry_in_force(tmp_path: Path) -> None:
    later = GOOD.replace("2026-10-23", "2026-12-01").replace('input = "2.00"', 'input = "1.25"')
    (tmp_path / "t.toml").write_text(GOOD + "\n" + later)
    before = run("prices", "show", "--at", "2026-11-30T23:59:59Z", str(tmp_path))
    after = run("prices", "show", "--at", "2026-12-01", str(tmp_path))
    assert before.returncode == 0 and after.returncode == 0, before.stderr + after.stderr
    [row_before] = [line for line in before.stdout.splitlines() if line.startswith("m ")]
    [row_after] = [line for line in after.stdout.splitlines() if line.startswith("m ")]
    assert row_before.split()[3] == "2.00" and row_after.split()[3] == "1.25"


def test_prices_show_default_has_kimi_highspeed() -> None:
    r = run("prices", "show")
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith("kimi-k3.1-pro ")]
    assert sorted((x[1], x[3], x[6]) for x in rows) == [("highspeed", "4.00", "20.00"),
                                                       ("standard", "2.00", "10.00")]


V2 = GOOD.replace('source = "test"', '''source = "test"
cache_write_1h = "3.2"
web_search_per_1k = "10.00"
inference_geo = "us"

[[price.band]]
above_input_tokens = 200000
input = "4.00"
output = "15.00"

[[price.band]]
above_input_tokens = 1000000
cache_write_1h = "0.0000000001"
''')


def test_prices_show_prints_the_version_2_prices_and_one_line_per_band(tmp_path: Path) -> None:
    (tmp_path / "t.toml").write_text(GOOD + "\n" + V2)
    r = run("prices", "show", "--at", "2026-11-01", str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].split()[7:11] == ["cache_write_1h", "web_search_1k", "geo", "effective_from"]
    rows = [line.split() for line in lines if line.startswith("m ")]
    # The plain entry shows "-" for what it does not price; the us entry its 1-hour write, fee and region.
    assert [x[7:10] for x in rows] == [["-", "-", "-"], ["3.2", "10.00", "us"]]
    i = lines.index(next(line for line in lines if line.startswith("m ") and " us " in line))
    assert lines[i + 1:i + 3] == ["  band above 200,000 input-side tokens: input 4.00, output 15.00",
                                  "  band above 1,000,000 input-side tokens: cache_write_1h 0.0000000001"]


def test_keys_new_prints_a_key_and_its_digest() -> None:
    r = run("keys", "new", "search-team")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    key = lines[1]
    assert key.startswith("llmm-") and len(key) > 40
    assert f'key_sha256 = ["{hashlib.sha256(key.encode()).hexdigest()}"]' in r.stdout
    assert run("keys", "new", "search-team").stdout.splitlines()[1] != key


def test_export_rejects_bad_ranges_clearly(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    r = run("export", "--from", "2026-12-01", "--to", "2026-11-01", "--db", db, cwd=tmp_path)
    assert r.returncode == 2 and "--to must be after --from" in r.stderr
    r = run("export", "--from", "last tuesday", "--to", "2026-11-01", "--db", db, cwd=tmp_path)
    assert r.returncode == 2 and "invalid time 'last tuesday'" in r.stderr
    r = run("export", "--from", "2026-11-01", "--to", "2026-12-01", "--tz", "Mars/Olympus", "--db", db, cwd=tmp_path)
    assert r.returncode == 2 and "unknown time zone" in r.stderr


def test_serve_refuses_an_unknown_config_key(tmp_path: Path) -> None:
    (tmp_path / "llmmeter.toml").write_text("[server]\nprot = 8080\n")
    r = run("serve", "--upstream", "http://127.0.0.1:9/v1", cwd=tmp_path)
    assert r.returncode == 2 and "llmmeter.toml:2" in r.stderr and "prot" in r.stderr


@pytest.mark.parametrize("name", ['x"; evil = "1', "a\nb", "all", "other", "unauthenticated", "_x", ".x", "a b", "tëam",
                                  "x" * 65])
def test_keys_new_refuses_names_serve_would_refuse(name: str) -> None:
    r = run("keys", "new", name)
    assert r.returncode == 2 and r.stdout == "" and "tenant name" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_keys_new_prints_toml_that_serve_loads(tmp_path: Path) -> None:
    r = run("keys", "new", "search.team-2")
    snippet = r.stdout.split("add to llmmeter.toml:\n", 1)[1]
    assert tomllib.loads(snippet) == {"tenant": [{"name": "search.team-2",
                                                  "key_sha256": [hashlib.sha256(r.stdout.splitlines()[1].encode())
                                                                 .hexdigest()]}]}
    (tmp_path / "llmmeter.toml").write_text(snippet)
    assert [t.name for t in load(tmp_path / "llmmeter.toml", env={}).tenants] == ["search.team-2"]


@pytest.mark.parametrize(("args", "env", "words"), [
    (("--port", "99999"), {}, "flag --port: port must be a whole number from 1 to 65535, got 99999"),
    (("--port", "0"), {}, "flag --port: port must be a whole number from 1 to 65535"),
    (("--workers", "1000"), {}, "flag --workers: workers must be a whole number from 1 to 256"),
    ((), {"LLMMETER_WORKERS": "0"}, "variable LLMMETER_WORKERS: workers must be a whole number from 1 to 256"),
    ((), {"LLMMETER_PORT": "eighty"}, "variable LLMMETER_PORT: port must be a whole number"),
    ((), {"LLMMETER_METRICS_TOKEN": "t\u00f6ken"}, "variable LLMMETER_METRICS_TOKEN: metrics_token must be printable"),
])
def test_serve_refuses_bad_flags_and_variables_naming_them(tmp_path: Path, args: tuple[str, ...],
                                                           env: dict[str, str], words: str) -> None:
    r = subprocess.run([sys.executable, "-m", "proxy", "serve", "--upstream", "http://127.0.0.1:9/v1", *args],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path, env={**os.environ, **env})
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize(("data", "words"), [
    (b"[server]\n\xff\xfe = 1\n", "llmmeter.toml:2: not UTF-8 text"),
    (b"a = " + b"[" * 1000 + b"]" * 1000 + b"\n", "llmmeter.toml: arrays or tables nested too deeply"),
    (b'[server]\nread_timeout_s = nan\n', "llmmeter.toml:2: read_timeout_s must be a positive number"),
    (b'[[tenant]]\nname = "all"\n', "llmmeter.toml:2: tenant name 'all' is reserved"),
    (b'[[tenant]]\nkey_sha256 = []\n', "llmmeter.toml:1: [[tenant]] needs a name"),
])
def test_serve_refuses_hostile_config_naming_the_file(tmp_path: Path, data: bytes, words: str) -> None:
    (tmp_path / "llmmeter.toml").write_bytes(data)
    r = run("serve", "--upstream", "http://127.0.0.1:9/v1", cwd=tmp_path)
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_serve_refuses_an_upstream_without_base_url(tmp_path: Path) -> None:
    (tmp_path / "llmmeter.toml").write_text('[[upstream]]\nname = "moonshot"\napi_key_env = "K"\n')
    r = subprocess.run([sys.executable, "-m", "proxy", "serve"], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path, env={**os.environ, "K": "sk"})
    assert r.returncode == 2 and "llmmeter.toml:1: [[upstream]] 'moonshot' needs a base_url" in r.stderr, r.stderr


@pytest.mark.parametrize("text", ["price = [1,2]\n", "a = " + "[" * 1000 + "]" * 1000 + "\n",
                                  GOOD.replace("2026-10-23T00:00:00Z", "0001-01-01T00:00:00+01:00")])
def test_prices_check_reports_hostile_tables_without_a_traceback(tmp_path: Path, text: str) -> None:
    (tmp_path / "t.toml").write_text(text)
    (tmp_path / "dir.toml").mkdir()
    r = run("prices", "check", str(tmp_path))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{tmp_path / 't.toml'}" in r.stderr and f"{tmp_path / 'dir.toml'}: not a file" in r.stderr


def test_a_service_file_reaches_postgresql_with_nothing_secret_in_argv(tmp_path: Path, pg_url: str) -> None:
    """README's PostgreSQL example: the command line names a service, the file holds the rest."""
    from psycopg.conninfo import conninfo_to_dict

    from proxy.ledger import Ledger

    ledger = Ledger(pg_url, journal_dir=tmp_path / "journal")
    ledger.start()
    ledger.close()
    params = conninfo_to_dict(pg_url)
    service = tmp_path / "pg_service.conf"
    service.write_text("[llmmeter]\n" + "".join(f"{k}={params[k]}\n" for k in ("host", "port", "dbname", "user")))
    service.chmod(0o600)
    r = subprocess.run([sys.executable, "-m", "proxy", "export", "--from", "2026-11-01", "--to", "2026-12-01",
                        "--db", "postgresql://?service=llmmeter"], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path, env={**os.environ, "PGSERVICEFILE": str(service)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("id,")
