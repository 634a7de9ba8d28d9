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
