"""Headless Chromium for the HTML report: the DOM it builds and a screenshot, offline."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.strict import require

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars")


def chromium() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    require(browser is not None, "Debian's chromium is not installed (make test installs it as root)")
    assert browser is not None
    return browser


def run(page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Chromium on `page` with a throwaway profile; `args` say what to do (--dump-dom, --screenshot=...)."""
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        return subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
                              capture_output=True, text=True, timeout=120, cwd=profile)


def dump_dom(page: Path) -> str:
    done = run(page, "--dump-dom")
    assert done.returncode == 0 and "</html>" in done.stdout, done.stderr[-2000:]
    return done.stdout


def screenshot(page: Path, shot: Path, width: int = 1280, height: int = 6000) -> Path:
    done = run(page, f"--screenshot={shot}", f"--window-size={width},{height}")
    assert shot.exists() and shot.stat().st_size > 50_000, done.stderr[-2000:]
    return shot
