"""Group commit: a turn's records go to the journal in one write, before any of its bytes leave.

The serving transport takes the commit as its before-send hook; the protocol takes the hook
from the app it serves (LLMMeter.before_send)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from proxy.app import create_app
from proxy.ledger import Ledger
from proxy.ledger.group import GroupCommit
from proxy.server.coalesce import CoalescingTransport
from proxy.settings import load
from tests.ledger.helpers import EVER, full_record
from tests.server.fakes import Conn


def journal_ids(journal: Path) -> list[str]:
    return [orjson.loads(line)["id"] for seg in sorted(journal.glob("*.jsonl"))
            for line in seg.read_bytes().splitlines() if line]


class Socket:
    """Stands in for the client's socket: notes which records the journal held at each send."""

    def __init__(self, journal: Path) -> None:
        self.journal = journal
        self.sends: list[tuple[bytes, list[str]]] = []

    def write(self, data: bytes) -> None:
        self.sends.append((data, journal_ids(self.journal)))

    def is_closing(self) -> bool:
        return False


def test_a_turns_records_are_journaled_together_before_its_bytes_are_sent(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.db'}", journal)
    ledger.start()
    group = GroupCommit(ledger.append_many)

    async def turn() -> None:
        loop = asyncio.get_running_loop()
        group.bind(loop)
        sock = Socket(journal)
        transport = CoalescingTransport(sock, loop, group.commit)  # type: ignore[arg-type]
        try:
            transport.write(b"head")  # its flush is scheduled before any record exists
            group.append(full_record(1))
            group.append(full_record(2))
            transport.write(b"last byte")
            assert journal_ids(journal) == []  # held until the turn ends
            await asyncio.sleep(0)
            assert sock.sends == [(b"headlast byte", ["req-00000001", "req-00000002"])]
            group.append(full_record(3))  # a turn with no send: the turn's end commits it
            await asyncio.sleep(0)
            assert journal_ids(journal) == ["req-00000001", "req-00000002", "req-00000003"]
        finally:
            group.bind(None)

    asyncio.run(turn())
    assert ledger.flush()
    assert [r.id for r in ledger.rows(*EVER)] == ["req-00000001", "req-00000002", "req-00000003"]
    ledger.close()


def test_the_served_apps_records_are_journaled_before_the_protocol_sends(tmp_path: Path) -> None:
    settings = load(None, env={}, overrides={"upstream": "http://127.0.0.1:9", "db": f"sqlite:///{tmp_path / 'l.db'}"})
    app = create_app(settings)
    journal = app.parts.ledger.journal_dir
    app.parts.ledger.start()
    seen: list[list[str]] = []

    async def turn() -> None:
        app.group.bind(asyncio.get_running_loop())  # as lifespan startup does
        try:
            conn = Conn(app)
            conn.transport.write = lambda data: seen.append(journal_ids(journal))  # type: ignore[method-assign]
            conn.protocol.transport.write(b"head")
            app.group.append(full_record(1))
            conn.protocol.transport.write(b"last byte")
            await asyncio.sleep(0)
            assert seen == [["req-00000001"]]
        finally:
            app.group.bind(None)

    asyncio.run(turn())
    app.parts.ledger.close()


def test_without_a_loop_each_record_is_written_at_once(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.db'}", journal)
    ledger.start()
    group = GroupCommit(ledger.append_many)
    group.append(full_record(7))
    assert journal_ids(journal) == ["req-00000007"]

    async def unbound_on_shutdown() -> None:  # bind(None) writes what a turn still held
        group.bind(asyncio.get_running_loop())
        group.append(full_record(8))
        group.bind(None)
        assert journal_ids(journal) == ["req-00000007", "req-00000008"]

    asyncio.run(unbound_on_shutdown())
    assert ledger.flush() and ledger.count(*EVER) == 2
    ledger.close()


def test_a_record_that_cannot_be_journaled_does_not_cost_its_group(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.db'}", journal)
    ledger.start()
    odd: Any = full_record(2)
    odd.flags = [object()]  # orjson refuses it: memory keeps it, the others are journaled
    ledger.append_many([full_record(1), odd, full_record(3)])
    assert journal_ids(journal) == ["req-00000001", "req-00000003"]
    assert ledger.flush()
    assert [r.id for r in ledger.rows(*EVER)] == ["req-00000001", "req-00000003"]
    ledger.close()
