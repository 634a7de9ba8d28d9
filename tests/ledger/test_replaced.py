"""A SQLite ledger removed or replaced under a running writer: imports stop, records wait in the
journal, nothing goes into a deleted file or a stranger, and all of it lands once the real file
is back. A new file made after a restart is a new ledger: the removed one's journal is kept
aside for it, never imported into the new one."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.ledger import Ledger
from proxy.ledger.journal import ReadStats, label_of, read_segment
from proxy.ledger.store import sqlite_path
from tests.fake_upstream import FakeUpstream
from tests.ledger.helpers import EVER, full_record, wait_until
from tests.serve import Served

CHAT = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hi"}]}
USAGE = {"x-fake-usage": json.dumps({"prompt": 30, "completion": 4})}
SIDECARS = ("", "-wal", "-shm")


def move_aside(db: Path, aside: Path) -> None:
    aside.mkdir(exist_ok=True)
    for suffix in SIDECARS:
        if (db.parent / (db.name + suffix)).exists():
            os.rename(db.parent / (db.name + suffix), aside / (db.name + suffix))


def put_back(db: Path, aside: Path) -> None:
    for suffix in SIDECARS:  # the stand-in and whatever its readers made beside it go first
        (db.parent / (db.name + suffix)).unlink(missing_ok=True)
    for suffix in SIDECARS:
        if (aside / (db.name + suffix)).exists():
            os.rename(aside / (db.name + suffix), db.parent / (db.name + suffix))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.sqlite_only
def test_a_removed_then_replaced_ledger_stops_imports_until_it_is_back(db_url: str, ledgers: list[Ledger],
                                                                       tmp_path: Path) -> None:
    ledger = Ledger(db_url, busy_timeout_s=0.2)
    ledgers.append(ledger)
    ledger.start()
    db, aside = sqlite_path(db_url), tmp_path / "aside"
    ledger.append_many([full_record(i) for i in range(10)])
    assert ledger.flush()

    move_aside(db, aside)  # `rm data/ledger.db*`, but kept here to be put back
    ledger.append_many([full_record(i) for i in range(10, 20)])
    assert wait_until(lambda: not ledger.healthy)
    assert "was removed" in (ledger.problem or "") and ledger.pending == 10
    assert not ledger.flush(5)  # returns at once: nothing lands until the file is back
    assert not db.exists()  # no empty ledger made in its place

    shutil.copy(aside / db.name, db)  # a stand-in: yesterday's backup, say
    before = digest(db)
    ledger.append_many([full_record(i) for i in range(20, 30)])
    assert wait_until(lambda: "replaced by another file" in (ledger.problem or ""))
    assert ledger.pending == 20 and digest(db) == before  # nothing written into the stranger

    put_back(db, aside)
    assert wait_until(lambda: ledger.healthy and ledger.pending == 0, timeout=15)
    assert [r.id for r in ledger.rows(*EVER)] == [full_record(i).id for i in range(30)]


def ready(proxy: Served) -> tuple[int, dict[str, Any]]:
    r = httpx.get(proxy.url + "/readyz", timeout=5)
    return r.status_code, r.json()


def settled(proxy: Served) -> bool:
    status, body = ready(proxy)
    return status == 200 and body["pending_records"] == 0


def ids_in(db: Path) -> list[str]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return [r[0] for r in con.execute("SELECT upstream_request_id FROM requests")]
    finally:
        con.close()


class Load:
    """Clients sending requests until stopped; every response must be a whole 200."""

    def __init__(self, proxy: Served, clients: int = 4) -> None:
        self.proxy = proxy
        self.sent: list[str] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(clients)]
        for t in self._threads:
            t.start()

    def _run(self, n: int) -> None:
        with httpx.Client(timeout=10) as client:
            i = 0
            while not self._stop.is_set():
                stream = (i + n) % 2 == 0
                i += 1
                try:
                    r = client.post(self.proxy.base_url + "/chat/completions", json={**CHAT, "stream": stream},
                                    headers=USAGE)
                    whole = r.text.rstrip().endswith("[DONE]") if stream else "usage" in r.json()
                    if r.status_code != 200 or not whole:
                        self.failures.append(f"{r.status_code} {r.text[:200]}")
                    self.sent.append(r.headers["x-request-id"])
                except (httpx.HTTPError, ValueError) as e:
                    self.failures.append(repr(e))

    def grows_by(self, n: int, timeout: float = 20) -> bool:
        target = len(self.sent) + n
        return wait_until(lambda: len(self.sent) >= target, timeout=timeout)

    def stop(self) -> list[str]:
        self._stop.set()
        for t in self._threads:
            t.join(15)
        return self.sent


def test_a_served_ledger_replaced_under_load_and_put_back_keeps_every_request_once(
        fake: FakeUpstream, serve: Callable[..., Served], tmp_path: Path) -> None:
    proxy = serve(upstream=fake.base_url)
    load = Load(proxy)
    try:
        assert load.grows_by(100)
        move_aside(proxy.db, tmp_path / "aside")
        shutil.copy(tmp_path / "aside" / proxy.db.name, proxy.db)
        assert wait_until(lambda: ready(proxy)[0] == 503, timeout=15)
        _, body = ready(proxy)
        assert body["ledger_writable"] is False and "replaced by another file" in body["ledger_problem"]
        assert load.grows_by(100)  # relaying goes on meanwhile
    finally:
        sent = load.stop()
    assert load.failures == []
    assert ready(proxy)[1]["pending_records"] > 0
    put_back(proxy.db, tmp_path / "aside")
    assert wait_until(lambda: settled(proxy), timeout=20)
    assert "ledger_problem" not in ready(proxy)[1]
    assert sorted(ids_in(proxy.db)) == sorted(sent)  # every request, exactly once
    assert "after this process opened it" in proxy.output()  # logged once: removed, or replaced


def test_a_served_ledger_removed_under_load_is_a_new_ledger_after_a_restart_and_its_journal_is_kept_aside(
        fake: FakeUpstream, serve: Callable[..., Served], prices_dir: Path, tmp_path: Path) -> None:
    proxy = serve(upstream=fake.base_url)
    load = Load(proxy)
    try:
        assert load.grows_by(100)
        move_aside(proxy.db, tmp_path / "gone")  # `rm data/ledger.db*` (kept only to check against)
        assert wait_until(lambda: ready(proxy)[0] == 503, timeout=15)
        assert "was removed" in ready(proxy)[1]["ledger_problem"]
        assert load.grows_by(100)
    finally:
        sent = load.stop()
    assert load.failures == []
    assert not proxy.db.exists()
    proxy.stop()  # at once: the journal keeps what did not land
    again = Served(proxy.tmp, upstream=fake.base_url, args=("--prices", str(prices_dir))).start()
    try:
        assert wait_until(lambda: settled(again), timeout=20)
        new, old = ids_in(again.db), ids_in(tmp_path / "gone" / proxy.db.name)
        assert new == []  # a new, empty ledger: nothing of the removed one's is imported into it
        aside = sorted((proxy.db.parent / "journal" / "foreign").glob("*.jsonl"))
        kept = [r.upstream_request_id for p in aside for r in read_segment(os.open(p, os.O_RDONLY), ReadStats())]
        assert set(old) | set(kept) == set(sent)  # none lost: in the removed file, or kept aside for it
        assert {label_of(p) for p in aside} != {None}
        assert "not for this ledger" in again.output()  # and the log says whose they are
    finally:
        again.stop()
    assert oct(again.db.stat().st_mode & 0o777) == "0o640"
