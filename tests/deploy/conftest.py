"""The image built once per run, and llmmeter containers on the host's network."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.deploy import podman
from tests.serve import free_port
from tests.strict import require

IMAGE = "llmmeter-test:latest"


@pytest.fixture(scope="session")
def image() -> str:
    """The repository's Dockerfile built by podman; its layers stay cached for the next run."""
    lacking = podman.missing_tools()
    require(not lacking, f"cannot build the container: no {', '.join(lacking)} "
                         "(make test installs podman, runc and debootstrap as root on Debian)")
    podman.base_image()
    old = podman.run("image", "inspect", "--format", "{{.Id}}", IMAGE, check=False).stdout.strip()
    podman.build(IMAGE)
    new = podman.run("image", "inspect", "--format", "{{.Id}}", IMAGE).stdout.strip()
    if old and old != new:
        podman.run("rmi", old, check=False)  # the previous build, now untagged
    return IMAGE


class Container:
    """`llmmeter serve` in a container on the host's network, its ledger on a named volume."""

    def __init__(self, name: str, port: int) -> None:
        self.name = name
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def start(self, image: str, volume: str, upstream: str) -> Container:
        """Settings from the environment, as `docker run -e` gives them."""
        return self.run(image, volume, "-e", "LLMMETER_HOST=127.0.0.1", "-e", f"LLMMETER_PORT={self.port}",
                        "-e", f"LLMMETER_UPSTREAM={upstream}")

    def run(self, image: str, volume: str, *options: str) -> Container:
        # The healthcheck runs when a test asks (podman's timers need systemd, absent here).
        podman.run("run", "-d", "--name", self.name, "--network=host", "--health-interval=disable",
                   "-v", f"{volume}:/data", *options, image)
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if podman.run("inspect", "--format", "{{.State.Running}}", self.name).stdout.strip() != "true":
                break
            time.sleep(0.1)
        raise podman.PodmanError(f"{self.name} not ready:\n{self.logs()}")

    def logs(self) -> str:
        r = podman.run("logs", self.name, check=False)
        return r.stdout + r.stderr

    def exec(self, *args: str) -> str:
        return podman.run("exec", self.name, *args).stdout

    def ledger(self, expect: int, timeout: float = 10) -> list[dict[str, Any]]:
        """The rows `llmmeter export` reads from the ledger, once the importer has written `expect`."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.exec("llmmeter", "export", "--from", "2020-01-01", "--to", "2100-01-01", "--format", "jsonl")
            rows = [json.loads(line) for line in out.splitlines() if line.strip()]
            if len(rows) >= expect or time.monotonic() > deadline:
                return rows
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM, as `podman stop` sends it: llmmeter drains and closes its ledger."""
        podman.run("stop", "--time", "20", self.name)

    def remove(self) -> None:
        podman.run("rm", "--force", self.name, check=False)


@pytest.fixture
def volume() -> Iterator[str]:
    name = f"llmmeter-test-{uuid.uuid4().hex[:8]}"
    podman.run("volume", "create", name)
    yield name
    podman.run("volume", "rm", "--force", name, check=False)


@pytest.fixture
def container(image: str) -> Iterator[Callable[[str, str], Container]]:
    """Factory: container(volume, upstream) -> a started, ready Container; all removed at the end."""
    started: list[Container] = []

    def start(volume: str, upstream: str) -> Container:
        started.append(Container(f"llmmeter-test-{uuid.uuid4().hex[:8]}", free_port()))
        return started[-1].start(image, volume, upstream)

    yield start
    for c in started:
        c.remove()


@pytest.fixture
def containers() -> Iterator[list[Container]]:
    """Containers a test starts its own way; all removed at the end."""
    made: list[Container] = []
    yield made
    for c in made:
        c.remove()
