"""The SQL of retention (proxy/ledger/retention.py), written once for both dialects.

A month is pruned a chunk of rows per transaction, so a running `serve`'s imports (which
wait for the same write lock) get their turn between chunks; each chunk's transaction adds
what it deleted to `pruned_months` (migration 012), so a prune cut short is still on record.
"""

from __future__ import annotations

PRUNE_CHUNK = 20_000  # rows deleted per transaction


def count_sql(mark: str) -> str:
    return f"SELECT COUNT(*) AS n FROM requests WHERE start >= {mark} AND start < {mark}"


def _chunk_sql(mark: str) -> str:
    return f"SELECT id FROM requests WHERE start >= {mark} AND start < {mark} LIMIT {PRUNE_CHUNK}"


def delete_chunk_sql(mark: str) -> str:
    # By id (the primary key on both databases): at most PRUNE_CHUNK rows of the month.
    return f"DELETE FROM requests WHERE id IN ({_chunk_sql(mark)})"


def keep_batch_ids_chunk_sql(mark: str) -> str:
    """The batch results' ids among the chunk delete_chunk_sql deletes next, in the same
    transaction: kept in pruned_batch_ids (migration 017), so a download of the same results
    after the prune bills nothing again."""
    return (f"INSERT INTO pruned_batch_ids (id) SELECT id FROM requests WHERE id IN ({_chunk_sql(mark)}) "
            "AND endpoint = 'batch' ON CONFLICT (id) DO NOTHING")


def keep_batch_ids_sql(mark: str) -> str:
    """keep_batch_ids_chunk_sql for the whole month at once (PostgreSQL drops it whole)."""
    return (f"INSERT INTO pruned_batch_ids (id) SELECT id FROM requests WHERE start >= {mark} AND start < {mark} "
            "AND endpoint = 'batch' ON CONFLICT (id) DO NOTHING")


def record_sql(mark: str) -> str:
    return (f"INSERT INTO pruned_months (month, pruned_at, requests) VALUES ({mark}, {mark}, {mark}) "
            "ON CONFLICT (month) DO UPDATE SET pruned_at = excluded.pruned_at, "
            "requests = pruned_months.requests + excluded.requests")


def pruned_sql(mark: str) -> str:
    return f"SELECT month FROM pruned_months WHERE month >= {mark} AND month <= {mark} ORDER BY month"


OLDEST_SQL = "SELECT MIN(start) AS first FROM requests"
