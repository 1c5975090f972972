-- `dumpcat report`, summary: per run shown ($runs: the report's run, and its baseline with --against),
-- how much the catalog holds and how much of it went wrong. One aggregate per view, no row leaves
-- DuckDB.
WITH located AS (   -- where every tensor, and every statistic without a tensor file, was dumped
    SELECT run, rank, iteration FROM tensors WHERE list_contains($runs, run)
    UNION ALL
    SELECT run, rank, iteration FROM stats WHERE row_id IS NULL AND list_contains($runs, run)
),
w AS (
    SELECT run, count(DISTINCT rank) AS ranks, count(DISTINCT iteration) AS iterations,
           min(iteration) AS first_iteration, max(iteration) AS last_iteration,
           count(DISTINCT (rank, iteration)) FILTER (WHERE iteration IS NOT NULL) AS steps
    FROM located
    GROUP BY run
),
t AS (
    SELECT run, count(*) AS tensors, sum(nbytes) AS tensor_bytes, string_agg(DISTINCT producer, ', ') AS producers
    FROM tensors
    WHERE list_contains($runs, run)
    GROUP BY run
),
s AS (
    SELECT run, count(*) AS stat_rows, count(*) FILTER (WHERE has_nan OR has_inf) AS anomalous_tensors
    FROM stats
    WHERE list_contains($runs, run)
    GROUP BY run
),
f AS (SELECT run, count(*) AS anomalous_steps FROM first_anomaly WHERE list_contains($runs, run) GROUP BY run),
e AS (SELECT run, count(*) AS errors FROM ingest_errors WHERE list_contains($runs, run) GROUP BY run)
SELECT r.run,
       -- a run written by several hosts' writers has several roots: all of them
       coalesce(r.dump_root, array_to_string(r.dump_roots, ', ')) AS dump_root, r.device_target, r.ms_version,
       coalesce(w.ranks, 0) AS ranks, coalesce(w.iterations, 0) AS iterations,
       w.first_iteration, w.last_iteration, coalesce(w.steps, 0) AS steps,
       coalesce(t.tensors, 0) AS tensors, coalesce(t.tensor_bytes, 0) AS tensor_bytes, t.producers,
       coalesce(s.stat_rows, 0) AS stat_rows, coalesce(s.anomalous_tensors, 0) AS anomalous_tensors,
       coalesce(f.anomalous_steps, 0) AS anomalous_steps, coalesce(e.errors, 0) AS errors
FROM runs r
LEFT JOIN w USING (run)
LEFT JOIN t USING (run)
LEFT JOIN s USING (run)
LEFT JOIN f USING (run)
LEFT JOIN e USING (run)
WHERE list_contains($runs, r.run)
ORDER BY list_position($runs, r.run);
