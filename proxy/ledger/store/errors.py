"""What a ledger store raises: an outage to retry, a record to set aside, a ledger not to touch."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.errors import LLMMeterError


class StoreUnavailable(LLMMeterError):
    """The database refused a write or read (locked, full, gone); the ledger retries."""


class LedgerReplaced(StoreUnavailable):
    """The SQLite file at the ledger's path is no longer the one this process opened (removed
    or replaced): nothing is written until it is back; a restart takes the new file."""


class RecordRefused(LLMMeterError):
    """The database refused what is in a record (a value out of range, a constraint), not the
    write itself: retrying it cannot help, so the ledger sets it aside (proxy/ledger/deadletter.py)."""


class LedgerMissing(LLMMeterError):
    """A read-only command was given a ledger that does not exist: it never creates one."""


class LedgerOutdated(LLMMeterError):
    """A read-only command was given a ledger that lacks migrations this llmmeter reads with."""

    def __init__(self, where: str, versions: Sequence[int]) -> None:
        names = ", ".join(f"{v:03d}" for v in versions)
        super().__init__(f"{where}: the ledger's schema is older than this llmmeter (it lacks migration(s) {names}); "
                         "run `llmmeter migrate` to bring it up to date (report and export never change a ledger)")


class LedgerTooNew(LLMMeterError):
    """The ledger has migrations this llmmeter does not know; it is not written to."""

    def __init__(self, where: str, versions: Sequence[int]) -> None:
        names = ", ".join(f"{v:03d}" for v in versions)
        super().__init__(f"{where}: the ledger has schema migration(s) {names}, newer than this llmmeter knows; "
                         "it was upgraded by a newer llmmeter: run that version (or newer) against it")
