"""docker-compose.yml's llmmeter service built and started by podman-compose.

What this covers: the service builds from the file's `build: .`, starts from its image with
the file's environment (LLMMETER_UPSTREAM from the caller's environment) and its `ledger`
named volume at /data, meters a call, and keeps its ledger across `down` and `up`.
What it cannot: the prometheus and grafana services, whose images come from a registry that
is not reachable here (tests/observability runs Debian's Prometheus against the same rules,
and checks the dashboards), and the `ports` mapping: an override puts the service on the
host's network, where it reaches the fake upstream on 127.0.0.1, and podman drops port
mappings there (tests/observability/test_compose.py checks the mapping as resolved).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.deploy import podman
from tests.deploy.conftest import Container
from tests.deploy.test_container import USD, chat, metric
from tests.fake_upstream import FakeUpstream
from tests.serve import free_port
from tests.strict import require

pytestmark = pytest.mark.timeout(900)


class Compose:
    """podman-compose on the repository's compose file plus an override, as one project."""

    def __init__(self, override: Path, env: dict[str, str]) -> None:
        exe = shutil.which("podman-compose", path=str(Path(sys.executable).parent)) or shutil.which("podman-compose")
        require(exe is not None, "podman-compose is not installed (the test extra)")
        assert exe is not None
        self.project = f"llmmeter-test-{uuid.uuid4().hex[:8]}"
        self.cmd = [exe, "--project-name", self.project, "--in-pod", "false",
                    "--podman-build-args", shlex.join(podman.build_args()),
                    "-f", str(podman.REPO / "docker-compose.yml"), "-f", str(override)]
        self.env = {**podman.env(), **env}

    def __call__(self, *args: str, timeout: float = 900) -> str:
        r = subprocess.run([*self.cmd, *args], env=self.env, cwd=podman.REPO, capture_output=True,
                           text=True, timeout=timeout)
        assert r.returncode == 0, f"podman-compose {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
        return r.stdout


@contextlib.contextmanager
def project(tmp_path: Path, service: dict[str, Any], env: dict[str, str]) -> Iterator[Compose]:
    """The llmmeter service built from the file (podman's layer cache holds the image's layers),
    on the host's network, with `service` merged in; taken down with its volume at the end."""
    override = tmp_path / "compose.override.yml"
    override.write_text(json.dumps({"services": {"llmmeter": {
        "image": "llmmeter-test:compose", "network_mode": "host", **service}}}))
    c = Compose(override, {"GRAFANA_ADMIN_PASSWORD": "unused", **env})
    try:
        c("build", "llmmeter")
        yield c
    finally:
        subprocess.run([*c.cmd, "down", "--volumes"], env=c.env, capture_output=True, timeout=120)
        podman.run("volume", "rm", "--force", f"{c.project}_ledger", check=False)


@pytest.fixture
def compose(image: str, fake: FakeUpstream, tmp_path: Path) -> Iterator[tuple[Compose, Container]]:
    port = free_port()
    service = {"environment": {"LLMMETER_HOST": "127.0.0.1", "LLMMETER_PORT": str(port)}}
    with project(tmp_path, service, {"LLMMETER_UPSTREAM": fake.base_url}) as c:
        yield c, Container(f"{c.project}_llmmeter_1", port)


def test_compose_starts_the_llmmeter_service(compose: tuple[Compose, Container]) -> None:
    up, service = compose
    up("up", "--detach", "--no-deps", "llmmeter")
    service.wait_ready()
    mounts = json.loads(podman.run("inspect", "--format", "{{json .Mounts}}", service.name).stdout)
    assert [(m["Name"], m["Destination"]) for m in mounts] == [(f"{up.project}_ledger", "/data")]
    chat(service)
    [row] = service.ledger(expect=1)
    assert Decimal(row["cost_usd"]) == USD
    assert metric(service, "llmmeter_requests_total", code="200") == 1

    up("down")  # the containers go; the named volume stays
    up("up", "--detach", "--no-deps", "llmmeter")
    service.wait_ready()
    [again] = service.ledger(expect=1)
    assert again["id"] == row["id"]


def test_compose_runs_a_mounted_config_with_the_variables_it_names(image: str, fake: FakeUpstream,
                                                                    tmp_path: Path) -> None:
    """docs/deploy.md: llmmeter.toml mounted, LLMMETER_UPSTREAM= (empty) and LLMMETER_ENV_FILE
    naming the key its upstream's api_key_env names. The config's port and ledger are in force."""
    port = free_port()
    conf = tmp_path / "llmmeter.toml"
    conf.write_text(f'[server]\nhost = "127.0.0.1"\nport = {port}\n\n'
                    '[ledger]\nurl = "sqlite:////data/mounted.db"\n\n'
                    f'[[upstream]]\nname = "moonshot"\nbase_url = "{fake.base_url}"\n'
                    'api_key_env = "MOONSHOT_API_KEY"\n')
    secrets = tmp_path / "llmmeter.env"
    secrets.write_text("MOONSHOT_API_KEY=sk-compose-env-file\n")
    service = {"volumes": ["ledger:/data", f"{conf}:/app/llmmeter.toml:ro"]}
    with project(tmp_path, service, {"LLMMETER_UPSTREAM": "", "LLMMETER_ENV_FILE": str(secrets)}) as up:
        up("up", "--detach", "--no-deps", "llmmeter")
        c = Container(f"{up.project}_llmmeter_1", port)
        c.wait_ready()
        chat(c)
        [row] = c.ledger(expect=1)
        assert Decimal(row["cost_usd"]) == USD and row["upstream"] == "moonshot"
        assert fake.requests[-1]["headers"]["authorization"] == "Bearer sk-compose-env-file"
        assert c.exec("ls", "/data").split().count("mounted.db") == 1
