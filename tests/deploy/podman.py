"""Debian's podman, driven as the deploy tests need it: rootful, runc, no registry.

podman reads only `containers.conf` beside this file (CONTAINERS_CONF): runc rather than
crun, which fails on this VM's hybrid cgroups, and ulimits the VM grants. No container
registry is reachable, so the image the Dockerfile starts FROM is made here when missing:
Debian's own Python, debootstrapped from Debian's repository, imported under that name, and
its tarball kept under the user's cache folder for the next run. Builds use the host's
network and mount its CA bundle, so pip reaches PyPI as the host does.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import ssl
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONF = Path(__file__).with_name("containers.conf")
MIRROR = "http://deb.debian.org/debian"
# What a python:X.Y-slim-SUITE image offers the Dockerfile: `python` with venv and pip.
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
STANDIN_LABEL = "org.llmmeter.standin"


class PodmanError(RuntimeError):
    """A podman (or debootstrap) command failed; the message carries its output."""


def missing_tools() -> list[str]:
    """What this machine lacks to build and run the image: empty when the tests can run."""
    lacking = [t for t in ("podman", "runc") if shutil.which(t) is None]
    if os.geteuid() != 0:
        lacking.append("root (the tests use rootful podman)")
    return lacking


def env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONF)}


def run(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["podman", *args], env=env(), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise PodmanError(f"podman {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


def base_image(dockerfile: Path = REPO / "Dockerfile") -> str:
    """The Dockerfile's FROM image, made from Debian's repository if podman does not hold it."""
    names = {m.group(1) for m in re.finditer(r"^FROM\s+(\S+)", dockerfile.read_text(), re.MULTILINE)}
    if len(names) != 1:
        raise PodmanError(f"expected one base image in {dockerfile}, found {sorted(names)}")
    name = names.pop()
    m = re.fullmatch(r"python:(\d+\.\d+)-slim-(\w+)", name)
    if m is None:
        raise PodmanError(f"no recipe for a stand-in of {name}: only python:X.Y-slim-SUITE")
    version, suite = m.groups()
    recipe = hashlib.sha256(f"{suite} {MIRROR} {BASE_PACKAGES}".encode()).hexdigest()[:12]
    held = run("image", "inspect", "--format", f'{{{{index .Labels "{STANDIN_LABEL}"}}}}', name, check=False)
    if held.returncode == 0 and held.stdout.strip() in ("", "<no value>", recipe):
        return name  # the real image, or this recipe's stand-in
    tarball = cache_dir() / f"{suite}-{recipe}.tar"
    if not tarball.exists():
        debootstrap(suite, tarball)
    run("import", "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--change", "ENV LANG=C.UTF-8", "--change", 'CMD ["python3"]',
        "--change", f"LABEL {STANDIN_LABEL}={recipe}", str(tarball), name, timeout=300)
    got = run("run", "--rm", "--network=none", name, "python", "-c",
              "import sys; print('%d.%d' % sys.version_info[:2])").stdout.strip()
    if got != version:
        raise PodmanError(f"Debian {suite}'s python3 is {got}, but the Dockerfile asks for {name}")
    return name


def cache_dir() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = root / "llmmeter" / "base-images"
    path.mkdir(parents=True, exist_ok=True)
    return path


def debootstrap(suite: str, tarball: Path) -> None:
    """A minimal Debian `suite` with Python as /usr/local/bin/python, packed into `tarball`."""
    if shutil.which("debootstrap") is None:
        raise PodmanError("debootstrap is not installed (Debian package debootstrap)")
    with tempfile.TemporaryDirectory(prefix="llmmeter-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        r = subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
                            suite, str(root), MIRROR], capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise PodmanError(f"debootstrap {suite} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr}")
        (root / "usr/local/bin/python").symlink_to("/usr/bin/python3")
        for cache in ("var/lib/apt/lists", "var/cache/apt"):
            shutil.rmtree(root / cache, ignore_errors=True)
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."],
                       check=True, timeout=300)
        partial.replace(tarball)


def build(tag: str, context: Path = REPO, extra: Sequence[str] = ()) -> None:
    """`podman build` of `context` as `tag`, keeping HEALTHCHECK (docker format)."""
    run("build", *build_args(), *extra, "-t", tag, str(context), timeout=900)


def build_args() -> list[str]:
    """Host network, no pulls, and the host's CA bundle for pip: mounted, never baked in."""
    ca = os.environ.get("SSL_CERT_FILE") or ssl.get_default_verify_paths().cafile or \
        "/etc/ssl/certs/ca-certificates.crt"
    pip_conf = cache_dir().parent / "build-pip.conf"
    pip_conf.write_text("[global]\ncert = /run/llmmeter-build/ca.crt\n")
    return ["--format", "docker", "--network=host", "--pull=never",
            "-v", f"{ca}:/run/llmmeter-build/ca.crt:ro", "-v", f"{pip_conf}:/etc/pip.conf:ro"]

