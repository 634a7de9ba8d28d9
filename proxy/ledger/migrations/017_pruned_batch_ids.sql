-- The ids of batch result records whose rows a prune deleted (proxy/ledger/retention.py).
-- A batch result's id comes from its batch and line (proxy/relay/batch.py), so a download of
-- the same results after their month was pruned brings the same ids again: the hourly rollup
-- still counts them, and an insert skips an id kept here as it skips one still in requests.
CREATE TABLE pruned_batch_ids (
    id TEXT PRIMARY KEY
);
