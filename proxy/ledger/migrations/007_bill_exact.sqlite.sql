-- Version 2 of the record (SPEC "Usage extraction", "Price tables, version 2"): 1-hour cache
-- writes, per-call fees, the long-context band a request was priced at, and the cost the
-- provider itself reported. Existing rows read as 0 (tokens, calls) or NULL (not known).
-- fee_units is a subset of the cost (at most 10^18 units a record); provider_cost_units is
-- refused above 10^18 units by the usage reader.
ALTER TABLE requests ADD COLUMN cache_write_1h_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE requests ADD COLUMN web_search_calls BIGINT NOT NULL DEFAULT 0;
ALTER TABLE requests ADD COLUMN price_band BIGINT;
ALTER TABLE requests ADD COLUMN fee_units BIGINT;
ALTER TABLE requests ADD COLUMN provider_cost_units BIGINT;

-- The hourly rollup keeps the same: 1-hour cache writes, web search calls, fees and the
-- provider's cost (money in two parts as in 005: whole dollars, and the units below one),
-- the records that had a provider cost, and the band joins the key (an unpriced record and
-- every row written before this migration count at band 0). SQLite cannot change a
-- primary key in place: the table is made again with the rows it held.
CREATE TABLE hourly_rollup_007 (
    hour                  BIGINT NOT NULL,
    model                 TEXT NOT NULL,
    unpriced_model        SMALLINT NOT NULL,
    tier                  TEXT NOT NULL,
    upstream              TEXT NOT NULL,
    tenant                TEXT NOT NULL,
    tag                   TEXT NOT NULL,
    workload              TEXT NOT NULL,
    metered               SMALLINT NOT NULL,
    requests              BIGINT NOT NULL,
    input_tokens          BIGINT NOT NULL,
    cache_read_tokens     BIGINT NOT NULL,
    cache_write_tokens    BIGINT NOT NULL,
    output_tokens         BIGINT NOT NULL,
    reasoning_tokens      BIGINT NOT NULL,
    estimated             BIGINT NOT NULL,
    unpriced              BIGINT NOT NULL,
    cost_units            BIGINT NOT NULL,
    cost_usd              BIGINT NOT NULL DEFAULT 0 CHECK (typeof(cost_usd) = 'integer'),
    price_band            BIGINT NOT NULL DEFAULT 0,
    cache_write_1h_tokens BIGINT NOT NULL DEFAULT 0,
    web_search_calls      BIGINT NOT NULL DEFAULT 0,
    fee_usd               BIGINT NOT NULL DEFAULT 0 CHECK (typeof(fee_usd) = 'integer'),
    fee_units             BIGINT NOT NULL DEFAULT 0,
    provider_cost_usd     BIGINT NOT NULL DEFAULT 0 CHECK (typeof(provider_cost_usd) = 'integer'),
    provider_cost_units   BIGINT NOT NULL DEFAULT 0,
    provider_costed       BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered, price_band)
);
INSERT INTO hourly_rollup_007 (hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered,
                               requests, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens,
                               reasoning_tokens, estimated, unpriced, cost_units, cost_usd)
SELECT hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered,
       requests, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens,
       reasoning_tokens, estimated, unpriced, cost_units, cost_usd
FROM hourly_rollup WHERE true;
DROP TABLE hourly_rollup;
ALTER TABLE hourly_rollup_007 RENAME TO hourly_rollup;
-- The input-side histogram (003) counts 1-hour cache writes from now on, in the writer
-- (proxy/ledger/store/sql.py, INPUT_SIDE); every row before this migration had none.
