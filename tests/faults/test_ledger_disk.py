"""The ledger's disk fills up or its database stops taking writes: relaying goes on, records wait, then land.

The full disk is real: a small tmpfs mounted for the test (root only) and filled to ENOSPC.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.fake_upstream import FakeUpstream
from tests.faults.helpers import wait_until
from tests.serve import Served
from tests.strict import require

CHAT = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hi"}]}
USAGE = {"x-fake-usage": json.dumps({"prompt": 30, "completion": 4})}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs of its own (room for a fresh ledger and its WAL), unmounted after the test."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = False
    if os.geteuid() == 0 and shutil.which("mount"):
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0755", "tmpfs", str(where)],
                                 capture_output=True).returncode == 0
    require(mounted, "mounting a tmpfs needs root (a real full disk cannot be made otherwise)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(disk: Path) -> Path:
    """Write a file until the disk says ENOSPC."""
    filler = disk / "filler"
    # Unbuffered: a buffered file would retry its unwritten tail at close and raise ENOSPC there.
    with filler.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError as e:
            assert e.errno == errno.ENOSPC
    # Small writes can still fit in the last partial page: take those too.
    with (disk / "filler2").open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0")
        except OSError as e:
            assert e.errno == errno.ENOSPC
    return filler


def _start(tmp: Path, upstream: str, prices_dir: Path, log: Path, config: str = "") -> Served:
    proxy = Served(tmp, upstream=upstream, config=config or None, args=("--prices", str(prices_dir)))
    proxy.log = log  # the log stays off the disk being filled
    return proxy.start()


def _send(proxy: Served, n: int) -> list[str]:
    """n requests, half streamed; every one must still succeed. Returns the upstream request ids."""
    ids = []
    for i in range(n):
        body = {**CHAT, "stream": i % 2 == 0}
        r = httpx.post(proxy.base_url + "/chat/completions", json=body, headers=USAGE, timeout=10)
        assert r.status_code == 200
        assert r.text.rstrip().endswith("[DONE]") if body["stream"] else r.json()["usage"]["prompt_tokens"] == 30
        ids.append(r.headers["x-request-id"])
    return ids


def _rows(db: Path) -> list[str]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return [r[0] for r in con.execute("SELECT upstream_request_id FROM requests")]
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


def _journaled(journal: Path) -> list[str]:
    ids = []
    for seg in journal.glob("*.jsonl"):
        for line in seg.read_bytes().splitlines():
            if line.strip():
                ids.append(orjson.loads(line)["upstream_request_id"])
    return ids


def _ready(proxy: Served) -> tuple[int, dict[str, Any]]:
    r = httpx.get(proxy.url + "/readyz", timeout=5)
    return r.status_code, r.json()


def _unwritable(proxy: Served) -> bool:
    status, body = _ready(proxy)
    return status == 503 and body["ready"] is False and body["ledger_writable"] is False


def _send_until_refused(proxy: Served, n: int) -> tuple[list[str], float, set[str]]:
    """Rounds of n requests until the ledger's database refuses a write and some of them are
    left waiting. How many still fit on the full disk (in pages SQLite already holds, or a
    WAL it restarts; a refused batch can land on its retry) varies from run to run; every
    request must succeed meanwhile. Returns what was sent, and the pending count and the
    waiting records seen together (pending read first: a record waiting after it was pending)."""
    sent: list[str] = []
    seen: tuple[float, set[str]] = (0.0, set())

    def refused() -> bool:
        nonlocal seen
        if not _unwritable(proxy):
            return False
        pending = proxy.metric("llmmeter_ledger_pending_records")
        seen = (pending, set(sent) - set(_rows(proxy.db)))
        return bool(seen[1])

    for _ in range(20):
        sent += _send(proxy, n)
        if wait_until(refused, timeout=5):
            return sent, *seen
    raise AssertionError(f"the database still took writes after {len(sent)} requests on a full disk")


def test_full_disk_under_the_database_with_the_journal_elsewhere(
        fake: FakeUpstream, small_disk: Path, tmp_path: Path, prices_dir: Path) -> None:
    journal = tmp_path / "journal"
    proxy = _start(small_disk, fake.base_url, prices_dir, tmp_path / "serve.log",
                   f'[ledger]\njournal_dir = "{journal}"\n')
    try:
        before = _send(proxy, 4)
        assert wait_until(lambda: len(_rows(proxy.db)) == 4)
        filler = _fill(small_disk)

        during, pending, waiting = _send_until_refused(proxy, 30)  # the proxy keeps relaying
        # Some writes still fit (in pages the database already had, or ones SQLite frees when it
        # drops its WAL on reconnecting): the rest waits, counted, and each one is in the journal.
        assert pending >= len(waiting) > 0 and waiting <= set(_journaled(journal))

        filler.unlink()
        (small_disk / "filler2").unlink()
        assert wait_until(lambda: _ready(proxy)[0] == 200, timeout=20)
        assert wait_until(lambda: len(_rows(proxy.db)) == 4 + len(during), timeout=20)
        assert sorted(_rows(proxy.db)) == sorted(before + during)  # each exactly once
        assert proxy.metric("llmmeter_ledger_pending_records") == 0
        after = _send(proxy, 2)
        assert wait_until(lambda: set(after) <= set(_rows(proxy.db)))
    finally:
        proxy.stop()


def test_full_disk_under_database_and_journal_keeps_records_in_memory(
        fake: FakeUpstream, small_disk: Path, tmp_path: Path, prices_dir: Path) -> None:
    proxy = _start(small_disk, fake.base_url, prices_dir, tmp_path / "serve.log")  # journal next to the db
    try:
        before = _send(proxy, 2)
        assert wait_until(lambda: len(_rows(proxy.db)) == 2)
        filler = _fill(small_disk)
        during, _, _ = _send_until_refused(proxy, 20)
        assert "database or disk is full" in proxy.output()
        filler.unlink()
        (small_disk / "filler2").unlink()
        assert wait_until(lambda: _ready(proxy)[0] == 200, timeout=20)
        assert wait_until(lambda: len(_rows(proxy.db)) == 2 + len(during), timeout=20)
        assert sorted(_rows(proxy.db)) == sorted(before + during)
    finally:
        proxy.stop()


def test_database_locked_by_another_process(fake: FakeUpstream, serve: Any) -> None:
    """No root needed: another process holding SQLite's write lock is an outage of the database itself."""
    proxy = serve(upstream=fake.base_url)
    before = _send(proxy, 2)
    assert wait_until(lambda: len(_rows(proxy.db)) == 2)
    blocker = sqlite3.connect(proxy.db, isolation_level=None, timeout=10)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        during = _send(proxy, 10)
        assert wait_until(lambda: _unwritable(proxy), timeout=20)
        assert proxy.metric("llmmeter_ledger_pending_records") == 10
        assert set(during) <= set(_journaled(proxy.db.parent / "journal"))
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert wait_until(lambda: _ready(proxy)[0] == 200, timeout=20)
    assert wait_until(lambda: len(_rows(proxy.db)) == 12, timeout=20)
    assert sorted(_rows(proxy.db)) == sorted(before + during)
