-- The hourly rollup (002) and the input-side histogram (003) are now kept per batch by the
-- writer (proxy/ledger/sqlite.py, SqliteWriter.insert_many), in the batch's own
-- transaction: one grouped upsert per batch instead of two per row. The row triggers cost
-- more than the inserts themselves (26.5 against 11.4 µs of CPU per record), and that CPU
-- is taken from the relay on a small machine.
DROP TRIGGER requests_hourly_rollup;
DROP TRIGGER requests_input_side_histogram;
