"""The SQL of retention (proxy/ledger/retention.py), written once for both dialects.

A month is pruned a chunk of rows per transaction, so a running `serve`'s imports (which
wait for the same write lock) get their turn between chunks; each chunk's transaction adds
what it deleted to `pruned_months` (migration 012), so a prune cut short is still on record.
"""

from __future__ import annotations

PRUNE_CHUNK = 20_000  # rows deleted per transaction


def count_sql(mark: str) -> str:
    return f"SELECT COUNT(*) AS n FROM requests WHERE start >= {mark} AND start < {mark}"


def delete_chunk_sql(mark: str) -> str:
    # By id (the primary key on both databases): at most PRUNE_CHUNK rows of the month.
    return (f"DELETE FROM requests WHERE id IN (SELECT id FROM requests WHERE start >= {mark} AND start < {mark} "
            f"LIMIT {PRUNE_CHUNK})")


def record_sql(mark: str) -> str:
    return (f"INSERT INTO pruned_months (month, pruned_at, requests) VALUES ({mark}, {mark}, {mark}) "
            "ON CONFLICT (month) DO UPDATE SET pruned_at = excluded.pruned_at, "
            "requests = pruned_months.requests + excluded.requests")


def pruned_sql(mark: str) -> str:
    return f"SELECT month FROM pruned_months WHERE month >= {mark} AND month <= {mark} ORDER BY month"


OLDEST_SQL = "SELECT MIN(start) AS first FROM requests"
