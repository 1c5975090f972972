-- `dumpcat report --against`: per iteration and operator of $run against $baseline, kept as
-- `report_compare_ops`: the smallest cosine and the largest max_abs_err of its outputs over ranks,
-- slots and occurrences (pairs matched in both runs, from `comparisons`), and `x`, its place in the
-- iteration's execution order (ordered as first_divergence orders a step).
WITH c AS (
    SELECT iteration, op_name, op_type, cosine, max_abs_err, status,
           row_number() OVER (PARTITION BY rank, iteration
                              ORDER BY timestamp_us NULLS LAST, graph_id, exec_index NULLS LAST, slot, occurrence)
               AS pos
    FROM comparisons
    WHERE run = $run AND baseline_run = $baseline AND io = 'output' AND iteration IS NOT NULL
      AND status NOT IN ('only_in_run', 'only_in_baseline')
),
ops AS (
    SELECT iteration, op_name, any_value(op_type) AS op_type, min(pos) AS pos,
           min(cosine) AS cosine, max(max_abs_err) AS max_abs_err, count(*) AS pairs,
           string_agg(DISTINCT status, ', ' ORDER BY status) AS statuses
    FROM c
    GROUP BY iteration, op_name
)
SELECT *, row_number() OVER (PARTITION BY iteration ORDER BY pos, op_name) - 1 AS x
FROM ops;
