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

import json
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

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


@pytest.fixture
def compose(image: str, fake: FakeUpstream, tmp_path: Path) -> Iterator[tuple[Compose, Container]]:
    """The llmmeter service built from the file (podman's layer cache holds `image`'s layers)."""
    port = free_port()
    override = tmp_path / "compose.override.yml"
    override.write_text(json.dumps({"services": {"llmmeter": {
        "image": "llmmeter-test:compose", "network_mode": "host",
        "environment": {"LLMMETER_HOST": "127.0.0.1", "LLMMETER_PORT": str(port)}}}}))
    c = Compose(override, {"LLMMETER_UPSTREAM": fake.base_url, "GRAFANA_ADMIN_PASSWORD": "unused"})
    try:
        c("build", "llmmeter")
        yield c, Container(f"{c.project}_llmmeter_1", port)
    finally:
        subprocess.run([*c.cmd, "down", "--volumes"], env=c.env, capture_output=True, timeout=120)
        podman.run("volume", "rm", "--force", f"{c.project}_ledger", check=False)


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
