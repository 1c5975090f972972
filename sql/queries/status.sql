-- Per run: how many files the catalog holds (tensors plus other files ingested) and how many
-- files or lines are in error, for `dumpcat status`.
WITH t AS (SELECT run, count(*) AS tensors FROM raw_tensors GROUP BY run),
m AS (
    SELECT run, count(*) FILTER (WHERE status = 'ok') AS other_ok
    FROM (SELECT run, rel_path, arg_max(status, "at") AS status FROM raw_manifest
          WHERE kind <> 'tensor' GROUP BY run, rel_path)
    GROUP BY run
),
e AS (SELECT run, count(*) AS errors FROM ingest_errors GROUP BY run)
SELECT r.run,
       coalesce(t.tensors, 0) + coalesce(m.other_ok, 0) AS ingested,
       coalesce(t.tensors, 0) AS tensors,
       coalesce(e.errors, 0) AS errors
FROM (SELECT DISTINCT run FROM raw_runs) r  -- a row per writer's shard of a run: one per run
LEFT JOIN t USING (run)
LEFT JOIN m USING (run)
LEFT JOIN e USING (run)
ORDER BY r.run;
