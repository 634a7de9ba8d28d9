-- Metered requests counted per UTC hour, tenant and input-side size bucket, so the report
-- finds which bucket holds each tenant's median and p95 from a few thousand counts, then
-- sorts only the requests inside those buckets: exact percentiles without sorting a month.
-- Buckets: every size below 16, then four per doubling (each ~19% wide), up to 2^40.
-- Bounds are round(16 * 2^(j/4)); the bucket of n is the largest bound <= n.
CREATE TABLE input_side_bounds (lo BIGINT PRIMARY KEY);
INSERT INTO input_side_bounds (lo) VALUES
    (0), (1), (2), (3), (4), (5), (6), (7), (8), (9), (10), (11), (12), (13), (14), (15), (16),
    (19), (23), (27), (32), (38), (45), (54), (64), (76), (91), (108), (128), (152), (181), (215),
    (256), (304), (362), (431), (512), (609), (724), (861), (1024), (1218), (1448), (1722), (2048),
    (2435), (2896), (3444), (4096), (4871), (5793), (6889), (8192), (9742), (11585), (13777),
    (16384), (19484), (23170), (27554), (32768), (38968), (46341), (55109), (65536), (77936),
    (92682), (110218), (131072), (155872), (185364), (220436), (262144), (311744), (370728),
    (440872), (524288), (623487), (741455), (881744), (1048576), (1246974), (1482910), (1763488),
    (2097152), (2493948), (2965821), (3526975), (4194304), (4987896), (5931642), (7053950),
    (8388608), (9975792), (11863283), (14107901), (16777216), (19951585), (23726566), (28215802),
    (33554432), (39903169), (47453133), (56431603), (67108864), (79806339), (94906266),
    (112863206), (134217728), (159612677), (189812531), (225726413), (268435456), (319225354),
    (379625062), (451452825), (536870912), (638450708), (759250125), (902905651), (1073741824),
    (1276901417), (1518500250), (1805811301), (2147483648), (2553802834), (3037000500),
    (3611622603), (4294967296), (5107605667), (6074001000), (7223245206), (8589934592),
    (10215211334), (12148002000), (14446490411), (17179869184), (20430422668), (24296004000),
    (28892980823), (34359738368), (40860845337), (48592008000), (57785961645), (68719476736),
    (81721690674), (97184015999), (115571923291), (137438953472), (163443381347), (194368031998),
    (231143846582), (274877906944), (326886762695), (388736063997), (462287693163), (549755813888),
    (653773525390), (777472127994), (924575386327), (1099511627776);

CREATE TABLE input_side_histogram (
    hour     BIGINT NOT NULL,  -- start / 3600000000: UTC hours since the epoch
    tenant   TEXT NOT NULL,
    bucket   BIGINT NOT NULL,  -- an input_side_bounds.lo
    requests BIGINT NOT NULL,
    PRIMARY KEY (hour, tenant, bucket)
);

-- As in 002: a statement-level trigger over the rows one INSERT added (none skipped by
-- ON CONFLICT DO NOTHING), upserted in key order so concurrent writers never deadlock.
CREATE FUNCTION requests_input_side_histogram() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO input_side_histogram AS h
    SELECT a.start / 3600000000, a.tenant,
           (SELECT MAX(lo) FROM input_side_bounds WHERE lo <= a.input_tokens + a.cache_read_tokens
                                                          + a.cache_write_tokens), COUNT(*)
    FROM added a WHERE a.endpoint IN ('chat', 'completions', 'embeddings', 'responses', 'messages')
    GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
    ON CONFLICT (hour, tenant, bucket) DO UPDATE SET requests = h.requests + excluded.requests;
    RETURN NULL;
END
$$;
CREATE TRIGGER requests_input_side_histogram AFTER INSERT ON requests
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION requests_input_side_histogram();

-- Ledgers written before this migration: their rows, counted once.
INSERT INTO input_side_histogram
SELECT hour, tenant, bucket, COUNT(*) FROM (
    SELECT start / 3600000000 AS hour, tenant,
           (SELECT MAX(lo) FROM input_side_bounds WHERE lo <= input_tokens + cache_read_tokens + cache_write_tokens)
               AS bucket
    FROM requests WHERE endpoint IN ('chat', 'completions', 'embeddings', 'responses', 'messages')) AS sized
GROUP BY 1, 2, 3;
