-- A batch belongs to the tenant that created it through llmmeter (proxy/ledger/store/batch_files.py).
-- Migration 010 kept, beside each output file, the first tenant whose request showed its batch:
-- on an upstream account every tenant shares, any tenant's GET /v1/batches shows every batch,
-- so that tenant could be a viewer, not the owner, and the results became the viewer's cost.
-- batch_owners keeps the creator, from the answer to POST /v1/batches or POST
-- /v1/messages/batches; batch_files keeps only which batch named a file, and a file's owner is
-- its batch's creator. The viewer column goes: nothing may read it as an owner again.
CREATE TABLE batch_owners (
    upstream   TEXT NOT NULL,
    batch_id   TEXT NOT NULL,
    tenant     TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (upstream, batch_id)
);

CREATE TABLE batch_files_011 (
    upstream TEXT NOT NULL,
    file_id  TEXT NOT NULL,
    batch_id TEXT NOT NULL,
    seen_at  BIGINT NOT NULL,
    PRIMARY KEY (upstream, file_id)
);
INSERT INTO batch_files_011 (upstream, file_id, batch_id, seen_at)
    SELECT upstream, file_id, batch_id, seen_at FROM batch_files;
DROP TABLE batch_files;
ALTER TABLE batch_files_011 RENAME TO batch_files;
