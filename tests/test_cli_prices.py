"""`prices check`, `show` and `diff` read the tables `serve` would use: the positional DIR, else
LLMMETER_PRICES, else `[pricing] dir` of the config (`--config`, LLMMETER_CONFIG, ./llmmeter.toml),
else the shipped tables; and each says which folder it read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.pricing.test_loader import GOOD

BROKEN = GOOD.replace('output = "10.00"', "output = 10.0")  # line 7: a float, not a decimal string


def run(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LLMMETER_")}
    return subprocess.run([sys.executable, "-m", "proxy", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd, env={**base, **env})


def broken_dir(tmp_path: Path) -> Path:
    d = tmp_path / "mine"
    d.mkdir()
    (d / "bad.toml").write_text(BROKEN)
    return d


def test_prices_check_fails_on_a_broken_folder_named_by_llmmeter_prices(tmp_path: Path) -> None:
    d = broken_dir(tmp_path)
    r = run("prices", "check", cwd=tmp_path, LLMMETER_PRICES=str(d))
    assert r.returncode == 1, r.stdout
    assert f"{d / 'bad.toml'}:7: output must be a decimal string" in r.stderr
    assert f"{d} (from LLMMETER_PRICES): 1 error" in r.stderr
    assert "all valid" not in r.stdout


def test_prices_check_reads_the_config_pricing_dir(tmp_path: Path) -> None:
    d = broken_dir(tmp_path)
    conf = tmp_path / "conf.toml"
    conf.write_text(f'[pricing]\ndir = "{d}"\n')
    r = run("prices", "check", "--config", str(conf), cwd=tmp_path)
    assert r.returncode == 1 and f"{d} ([pricing] dir in {conf}): 1 error" in r.stderr, r.stderr
    # ./llmmeter.toml is the config when none is named, as for serve.
    (tmp_path / "llmmeter.toml").write_text(conf.read_text())
    r = run("prices", "check", cwd=tmp_path)
    assert r.returncode == 1 and f"{d} ([pricing] dir in llmmeter.toml): 1 error" in r.stderr, r.stderr


def test_the_variable_beats_the_config_and_the_argument_beats_both(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.mkdir()
    (good / "t.toml").write_text(GOOD)
    (tmp_path / "llmmeter.toml").write_text(f'[pricing]\ndir = "{broken_dir(tmp_path)}"\n')
    r = run("prices", "check", cwd=tmp_path, LLMMETER_PRICES=str(good))
    assert r.returncode == 0 and r.stdout == f"{good} (from LLMMETER_PRICES): 1 price entries, all valid\n", r.stderr
    r = run("prices", "check", str(good), cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith(f"{good} (given on the command line):"), r.stderr


def test_prices_check_says_it_read_the_shipped_tables(tmp_path: Path) -> None:
    r = run("prices", "check", cwd=tmp_path)
    assert r.returncode == 0 and "(the shipped tables): " in r.stdout and "all valid" in r.stdout, r.stderr


def test_prices_show_prints_the_tables_in_use(tmp_path: Path) -> None:
    d = tmp_path / "mine"
    d.mkdir()
    (d / "t.toml").write_text(GOOD)
    r = run("prices", "show", "--at", "2026-11-01", cwd=tmp_path, LLMMETER_PRICES=str(d))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{d} (from LLMMETER_PRICES): prices in force at 2026-11-01")
    assert [line.split()[0] for line in r.stdout.splitlines()[2:]] == ["m"]  # not the shipped models
    (d / "bad.toml").write_text(BROKEN)
    r = run("prices", "show", cwd=tmp_path, LLMMETER_PRICES=str(d))
    assert r.returncode == 2 and "bad.toml:7" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_prices_diff_compares_the_config_tables(tmp_path: Path) -> None:
    d = tmp_path / "mine"
    d.mkdir()
    (d / "t.toml").write_text(GOOD)
    conf = tmp_path / "conf.toml"
    conf.write_text(f'[pricing]\ndir = "{d}"\n')
    r = run("prices", "diff", "--against", "genai-prices", "--at", "2026-11-01", "--config", str(conf), cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert r.stdout.startswith(f"{d} ([pricing] dir in {conf}) against genai-prices")
    assert f"missing  m standard: only in {d} (t.toml:1), not in genai-prices" in r.stdout
    assert r.stdout.endswith("1 difference\n")


def test_a_broken_config_is_reported_not_skipped(tmp_path: Path) -> None:
    (tmp_path / "llmmeter.toml").write_text("[pricing]\ndri = 'x'\n")
    r = run("prices", "check", cwd=tmp_path)
    assert r.returncode == 2 and "llmmeter.toml:2: unknown key 'dri'" in r.stderr, r.stderr
