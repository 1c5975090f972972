-- rank_metadata: .dump_metadata/ of each rank, the latest ingested copy (a live watcher reads a
-- rank's metadata again when one of its files is written after the others).
CREATE OR REPLACE VIEW rank_metadata AS
SELECT run, rank, dump_root, device_target, ms_version, dump_config, hccl_config
FROM raw_rank_meta
QUALIFY row_number() OVER (PARTITION BY run, rank ORDER BY ingested_at DESC NULLS LAST) = 1;

-- runs: one row per run (one dump tree ingested under one name, or the trees of one run that
-- writers on several hosts ingested, each its own ranks: `--writer`). `dump_roots` lists the
-- run's roots; `dump_root` is the root when there is one, NULL when there are several (a tensor's
-- file is `tensors.path`, under its own writer's root). `ingested_at` is the first ingest's.
CREATE OR REPLACE VIEW runs AS
WITH meta AS (
    SELECT run,
           count(DISTINCT rank) AS ranks,
           string_agg(DISTINCT device_target, ',') AS device_target,
           string_agg(DISTINCT ms_version, ',') AS ms_version,
           any_value(dump_config) AS dump_config
    FROM rank_metadata
    GROUP BY run
),
r AS (
    SELECT run,
           CASE WHEN count(DISTINCT dump_root) = 1 THEN min(dump_root) END AS dump_root,
           min(ingested_at) AS ingested_at,
           string_agg(DISTINCT dumpcat_version, ',' ORDER BY dumpcat_version) AS dumpcat_version,
           list(DISTINCT dump_root ORDER BY dump_root) AS dump_roots
    FROM raw_runs
    GROUP BY run
)
SELECT r.run, r.dump_root, r.ingested_at, r.dumpcat_version,
       m.ranks, m.device_target, m.ms_version, m.dump_config, r.dump_roots
FROM r
LEFT JOIN meta m USING (run);
