-- PostgreSQL keeps its statement-level triggers (002, 003): they already work once per
-- batch. This version exists so that version 4 means the same tables on both backends.
SELECT 1;
