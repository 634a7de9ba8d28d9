-- The monthly report's `unpriced_estimated` section reads the requests with no price or with
-- estimated usage (proxy/ledger/store/unpriced_report.py): a few in a hundred. This index holds
-- only those, by start, so the report reads them without scanning the month's every request.
-- Its WHERE is the report query's own condition, written the same way: both databases use a
-- partial index only for a query whose condition matches it (tests/ledger/test_uncertain_index.py).
CREATE INDEX requests_uncertain ON requests (start)
WHERE ((cost_units IS NULL AND outcome != 'rejected' AND endpoint IN ('batch', 'chat', 'completions', 'embeddings', 'messages', 'responses')) OR (usage_source = 'estimated'));
