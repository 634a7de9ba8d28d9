"""The durable usage ledger (SPEC "Ledger"): journal, batched import, replay, reads."""

from proxy.ledger.ledger import Ledger
from proxy.ledger.replay import ReplayStats
from proxy.ledger.store import StoreUnavailable

__all__ = ["Ledger", "ReplayStats", "StoreUnavailable"]
