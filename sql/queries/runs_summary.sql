-- One row per run, what a user wants to see first (`Catalog.runs()`, a catalog's notebook view):
-- the producer that wrote it, its ranks and steps (from its tensors and the rows of the producer's
-- statistics files, so a statistics-only dump has them too), how many tensors and bytes, how many
-- ingest errors, when it was first ingested and from where (NULL: several writers' roots).
WITH t AS (
    SELECT run, string_agg(DISTINCT producer, ',' ORDER BY producer) AS producer,
           count(*) AS tensors, coalesce(sum(nbytes), 0)::BIGINT AS tensor_bytes
    FROM tensors
    GROUP BY run
),
s AS (
    SELECT run, count(*) AS statistic_rows FROM raw_stat_rows GROUP BY run
),
steps AS (
    SELECT run, count(DISTINCT rank) AS ranks, count(DISTINCT iteration) AS steps,
           min(iteration) AS first_step, max(iteration) AS last_step
    FROM (SELECT run, rank, iteration FROM tensors
          UNION ALL
          SELECT run, rank, iteration FROM raw_stat_rows)
    GROUP BY run
),
e AS (
    SELECT run, count(*) AS errors FROM ingest_errors GROUP BY run
)
SELECT r.run, t.producer, coalesce(st.ranks, r.ranks) AS ranks, st.steps, st.first_step, st.last_step,
       coalesce(t.tensors, 0) AS tensors, coalesce(t.tensor_bytes, 0) AS tensor_bytes,
       coalesce(s.statistic_rows, 0) AS statistic_rows, coalesce(e.errors, 0) AS errors,
       r.ingested_at, r.dump_root
FROM runs r
LEFT JOIN t USING (run)
LEFT JOIN s USING (run)
LEFT JOIN steps st USING (run)
LEFT JOIN e USING (run)
ORDER BY r.ingested_at, r.run;
