-- Metered requests ordered by input-side tokens within each tenant, so the report's
-- median and p95 per tenant are read by walking this index from one end, exactly, instead
-- of sorting a month of rows. `start` is in the index so the walk never touches the table.
-- The expression and the endpoint list must stay word for word those of the report's
-- queries (proxy/ledger/store.py INPUT_SIDE and METERED_SQL), or the index is not used.
CREATE INDEX requests_input_side ON requests
    (tenant, (input_tokens + cache_read_tokens + cache_write_tokens), start)
    WHERE endpoint IN ('chat', 'completions', 'embeddings', 'responses', 'messages');
