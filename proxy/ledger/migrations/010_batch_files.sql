-- Files seen as a batch's output_file_id or error_file_id through llmmeter (SPEC "Version 4
-- additions", proxy/ledger/store/batch_files.py): only such a file's download is metered as
-- batch results without asking the upstream. One row per (upstream, file): the tenant whose
-- batch named it first, whose records its results become, whoever downloads it.
CREATE TABLE batch_files (
    upstream TEXT NOT NULL,
    file_id  TEXT NOT NULL,
    tenant   TEXT NOT NULL,
    batch_id TEXT NOT NULL,
    seen_at  BIGINT NOT NULL,
    PRIMARY KEY (upstream, file_id)
);
