"""Every command ends quietly when the reader of its output goes away (`llmmeter prices show |
head`): no traceback, the exit status of a process killed by SIGPIPE. The pipe is real: its
read end is closed before the command writes, so every write fails as it does after `head` exits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SIGPIPE_STATUS = 141


def with_reader_gone(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLMMETER_")}
        return subprocess.run([sys.executable, "-m", "proxy", *args], stdout=write, stderr=subprocess.PIPE,
                              cwd=cwd, env=env, timeout=60, check=False)
    finally:
        os.close(write)


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    done = subprocess.run([sys.executable, "-m", "proxy", "migrate", "--db", url], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    return url


@pytest.mark.parametrize("args", [
    ("prices", "show"),
    ("prices", "check"),
    ("keys", "new", "search-team"),
    ("prices", "diff", "--against", "genai-prices"),
    ("report", "--month", "2026-11", "--db", "{db}"),
    ("export", "--from", "2026-11-01", "--to", "2026-12-01", "--db", "{db}"),
    ("migrate", "--db", "{db}"),
])
def test_a_command_whose_reader_left_exits_quietly(tmp_path: Path, db: str, args: tuple[str, ...]) -> None:
    r = with_reader_gone(*(a.replace("{db}", db) for a in args), cwd=tmp_path)
    assert r.stderr == b"" and r.returncode == SIGPIPE_STATUS, r.stderr.decode()
