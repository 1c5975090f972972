-- `dumpcat report --against`: each iteration's first divergence of $run from $baseline, by
-- first_divergence()'s default tolerances ('tolerance') and as the first output that differs at
-- all (first_divergence(max_abs := 0): 'any difference'); over ranks, the one earliest in
-- execution order. `x` places it on its iteration's line (`report_compare_ops`). The first
-- $limit iterations of each kind.
WITH d AS (
    SELECT 'tolerance' AS kind, *
    FROM first_divergence()
    WHERE run = $run AND baseline_run = $baseline
    UNION ALL BY NAME
    SELECT 'any difference' AS kind, *
    FROM first_divergence(max_abs := 0)
    WHERE run = $run AND baseline_run = $baseline
),
earliest AS (
    SELECT DISTINCT ON (d.kind, d.iteration)
           d.kind, d.iteration, d.rank, d.op_type, d.op_name, d.io, d.slot, d.reason, d.status,
           d.cosine, d.max_abs_err, d.source_file, d.source_line, d.source_code, d.row_id,
           d.baseline_row_id, o.x
    FROM d
    LEFT JOIN report_compare_ops o ON o.iteration = d.iteration AND o.op_name = d.op_name
    ORDER BY d.kind, d.iteration, o.x NULLS LAST, d.rank
)
SELECT *
FROM earliest
QUALIFY row_number() OVER (PARTITION BY kind ORDER BY iteration NULLS LAST) <= $limit
ORDER BY kind DESC, iteration;
