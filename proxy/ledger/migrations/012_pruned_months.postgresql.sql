-- Retention (SPEC "Version 4 additions", proxy/ledger/retention.py): the UTC months whose
-- per-request rows `llmmeter ledger prune` deleted. Their hourly rollups stay; the report
-- reads this table to say which of its figures need the rows that are gone.
CREATE TABLE pruned_months (
    month     TEXT PRIMARY KEY,  -- YYYY-MM, a UTC month
    pruned_at BIGINT NOT NULL,   -- when rows of it were last deleted, UTC microseconds since the epoch
    requests  BIGINT NOT NULL    -- rows deleted, over every prune of the month
);

-- On PostgreSQL `requests` is partitioned by UTC month, so a prune drops a month's partition
-- instead of deleting its rows one by one (proxy/ledger/store/postgres.py). A partitioned
-- table's primary key must hold the partition key: (id, start). A record's start never
-- changes, so a record imported twice still meets its own row and is skipped (the writers
-- insert ON CONFLICT (id, start) DO NOTHING).
ALTER TABLE requests RENAME TO requests_unpartitioned;
ALTER INDEX requests_pkey RENAME TO requests_unpartitioned_pkey;
ALTER INDEX requests_start RENAME TO requests_unpartitioned_start;
ALTER INDEX requests_tenant_start RENAME TO requests_unpartitioned_tenant_start;
-- The rows moved below are in the rollups already: the triggers come back once they are moved.
DROP TRIGGER requests_hourly_rollup ON requests_unpartitioned;
DROP TRIGGER requests_input_side_histogram ON requests_unpartitioned;

CREATE TABLE requests (LIKE requests_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (start);
ALTER TABLE requests ADD PRIMARY KEY (id, start);
CREATE INDEX requests_start ON requests (start);
CREATE INDEX requests_tenant_start ON requests (tenant, start);
-- A row of a month with no partition lands here rather than being refused (the writers make
-- each month's partition before its first row, so it stays empty but for a pruned month's
-- late records).
CREATE TABLE requests_default PARTITION OF requests DEFAULT;

-- The partition of the UTC month yyyymm (202611: November 2026), `requests_202611`, made
-- when missing; rows of that month waiting in the default partition move into it first.
-- Writers of every replica call it, one at a time (the advisory lock), for each month a
-- batch holds that they have not seen yet.
CREATE FUNCTION requests_month_partition(yyyymm integer) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    first timestamptz := make_timestamptz(yyyymm / 100, yyyymm % 100, 1, 0, 0, 0, 'UTC');
    lo bigint := (EXTRACT(EPOCH FROM first) * 1000000)::bigint;
    hi bigint := (EXTRACT(EPOCH FROM first + interval '1 month') * 1000000)::bigint;
    name text := format('requests_%s', yyyymm);
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('llmmeter requests partitions'));
    IF to_regclass(name) IS NOT NULL THEN
        RETURN;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE requests INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name);
    EXECUTE format('WITH moved AS (DELETE FROM requests_default WHERE start >= %s AND start < %s RETURNING *) '
                   'INSERT INTO %I SELECT * FROM moved', lo, hi, name);
    EXECUTE format('ALTER TABLE requests ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', name, lo, hi);
END
$$;

DO $$
DECLARE
    m integer;
BEGIN
    FOR m IN SELECT DISTINCT to_char(to_timestamp(start / 1000000.0) AT TIME ZONE 'UTC', 'YYYYMM')::integer
             FROM requests_unpartitioned LOOP
        PERFORM requests_month_partition(m);
    END LOOP;
END
$$;
INSERT INTO requests SELECT * FROM requests_unpartitioned;
DROP TABLE requests_unpartitioned;

CREATE TRIGGER requests_hourly_rollup AFTER INSERT ON requests
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION requests_hourly_rollup();
CREATE TRIGGER requests_input_side_histogram AFTER INSERT ON requests
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION requests_input_side_histogram();
