-- The ledger's own id: every journal segment written for this ledger names it, and a
-- segment that names another ledger is never imported here (proxy/ledger/replay.py).
-- 32 lowercase hex digits from a random UUID (gen_random_uuid: PostgreSQL 13+), the same
-- form as 006_ledger_id.sqlite.sql; a copy of the database is the same ledger.
CREATE TABLE ledger_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO ledger_meta (key, value) VALUES ('ledger_id', replace(gen_random_uuid()::text, '-', ''));
