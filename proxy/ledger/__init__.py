"""The durable usage ledger (SPEC "Ledger"): journal, batched import, replay, reads."""

from proxy.ledger.ledger import Ledger, Migrated
from proxy.ledger.replay import ReplayStats
from proxy.ledger.store.errors import StoreUnavailable

__all__ = ["Ledger", "Migrated", "ReplayStats", "StoreUnavailable"]
