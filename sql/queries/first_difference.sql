-- For `dumpcat compare` when no output breaks the tolerances: the first output of $run that differs
-- from $baseline at all (in execution order, as first_divergence orders a step), with how many of
-- the compared outputs differ. No row when nothing was compared.
WITH outputs AS (
    SELECT * FROM comparisons
    WHERE run = $run AND baseline_run = $baseline AND io = 'output'
      AND status NOT IN ('only_in_run', 'only_in_baseline')
),
differing AS (
    SELECT * FROM outputs WHERE max_abs_err > 0 OR status NOT IN ('ok', 'unsupported', 'nan_in_both')
)
SELECT d.rank, d.iteration, d.op_name, d.slot, d.status, d.max_abs_err, d.cosine,
       (SELECT count(*) FROM differing) AS differing, (SELECT count(*) FROM outputs) AS compared
FROM (SELECT 1) one
LEFT JOIN (
    SELECT * FROM differing
    ORDER BY rank, iteration, timestamp_us NULLS LAST, graph_id, exec_index NULLS LAST, slot
    LIMIT 1
) d ON true
WHERE (SELECT count(*) FROM outputs) > 0
