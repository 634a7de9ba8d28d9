-- One row per request (SPEC "Ledger"). Times are integer microseconds since the Unix
-- epoch, UTC: exact, and fast to range-scan and group. Money is integer 10^-10 USD.
-- Types are chosen to mean the same in SQLite and PostgreSQL.
CREATE TABLE requests (
    id                   TEXT PRIMARY KEY,
    start                BIGINT NOT NULL,
    tenant               TEXT NOT NULL,
    endpoint             TEXT NOT NULL,
    stream               SMALLINT NOT NULL,
    code                 INTEGER NOT NULL,
    outcome              TEXT NOT NULL,
    upstream             TEXT NOT NULL DEFAULT '',
    end_user             TEXT,
    model_requested      TEXT,
    response_model       TEXT,
    model                TEXT,
    tier                 TEXT,
    input_tokens         BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens    BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens   BIGINT NOT NULL DEFAULT 0,
    output_tokens        BIGINT NOT NULL DEFAULT 0,
    reasoning_tokens     BIGINT,
    usage_source         TEXT NOT NULL DEFAULT 'upstream',
    flags                TEXT NOT NULL DEFAULT '',
    price_model          TEXT,
    price_tier           TEXT,
    price_effective_from BIGINT,
    cost_units           BIGINT,
    duration_ms          BIGINT NOT NULL DEFAULT 0,
    ttft_ms              BIGINT,
    tag                  TEXT,
    workload             TEXT,
    upstream_request_id  TEXT
);

CREATE INDEX requests_start ON requests (start);
CREATE INDEX requests_tenant_start ON requests (tenant, start);
