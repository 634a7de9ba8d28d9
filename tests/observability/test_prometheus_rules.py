"""promtool on prometheus/: the scrape config, the rules, and the rules' unit tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from tests.observability.stack import PROMETHEUS_DIR, RULE_FILES, load_yaml, rules
from tests.strict import require


def promtool(*args: str, cwd: Path = PROMETHEUS_DIR) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    require(exe is not None, "promtool is not installed (Debian package prometheus)")
    assert exe is not None
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_scrape_config_is_valid_and_loads_every_rule_file() -> None:
    r = promtool("check", "config", "prometheus.yml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(RULE_FILES)} rule files found" in r.stdout
    [job] = load_yaml(PROMETHEUS_DIR / "prometheus.yml")["scrape_configs"]
    assert job["job_name"] == "llmmeter"  # the alerts and dashboards select on it
    assert job["static_configs"] == [{"targets": ["llmmeter:8080"]}]  # the compose service


def test_rules_are_valid() -> None:
    r = promtool("check", "rules", *(str(f) for f in RULE_FILES))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(RULE_FILES)
    names = {r.get("alert") for _, r in rules()}
    assert {"LLMMeterTargetDown", "LLMMeterSpendRateAboveBudget", "LLMMeterUpstreamErrors",
            "LLMMeterEstimatedUsageRising", "LLMMeterLedgerBacklogGrowing", "LLMMeterMeteringFaults",
            "LLMMeterLedgerRejectedRecords", "LLMMeterLedgerLostRecords", "LLMMeterBudgetThresholdCrossed",
            "LLMMeterBudgetRunsOutSoon", "LLMMeterBudgetSpent", "LLMMeterBudgetRejecting",
            "LLMMeterBudgetOverrun"} <= names


def test_promtool_rejects_a_broken_rule(tmp_path: Path) -> None:
    """The check above can fail: the same rules with one expression broken do not pass."""
    doc = load_yaml(RULE_FILES[0])
    doc["groups"][0]["rules"][0]["expr"] = "sum by (model) (rate(llmmeter_cost_usd_total[5m]"
    broken = tmp_path / "broken.yml"
    broken.write_text(yaml.safe_dump(doc))
    r = promtool("check", "rules", str(broken))
    assert r.returncode != 0 and "FAILED" in r.stdout + r.stderr


def test_rule_unit_tests_pass() -> None:
    tests = sorted((PROMETHEUS_DIR / "tests").glob("*.yml"))
    assert len(tests) >= 3
    r = promtool("test", "rules", *(str(t.relative_to(PROMETHEUS_DIR)) for t in tests))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(tests)


def test_every_alert_has_a_unit_test() -> None:
    tested = {t["alertname"] for f in (PROMETHEUS_DIR / "tests").glob("*.yml")
              for case in load_yaml(f)["tests"] for t in case.get("alert_rule_test", [])}
    alerts = {r["alert"] for _, r in rules() if "alert" in r}
    assert alerts == tested
