-- The tensor pairs of two runs to compare (catalog/compare.py): a tensor of $run and one of
-- $baseline match on rank, iteration, operator (full name, or the name `compare_mapping` maps it
-- to), io, argument and occurrence (the n-th execution of that op/io/argument in the iteration,
-- ordered as it ran). The argument is its name where the producer names it (msprobe's arg_path:
-- `parameters_grad.weight`, `input.1.0`; msprobe lists a module's parameter gradients in the order
-- autograd finished them, which differs between runs of one model), else the slot. A tensor with
-- no partner is a pair too, the other side NULL. Files converted from another slot (msaccucmp) are
-- left out: their slot is compared once. Pairs already in `comparisons` are left out, so a re-run
-- (or a killed one) continues where it stopped.
--
-- Order within a step: the file timestamp, graph and execution index where the producer records
-- them (MindSpore, raw dumps); for msprobe, whose tensor files have none, the tensor's position in
-- dump.json (its stat row's exec_index), which is the order the APIs ran.
WITH described AS (
    SELECT row_id, any_value(arg_path) AS arg_path, min(exec_index) AS exec_index
    FROM raw_stat_rows
    WHERE run IN ($run, $baseline) AND row_id IS NOT NULL
    GROUP BY row_id
),
keyed AS (
    SELECT t.* REPLACE (coalesce(t.exec_index, d.exec_index) AS exec_index),
           coalesce(d.arg_path, 'slot ' || t.slot) AS arg_key
    FROM tensors t
    LEFT JOIN described d ON d.row_id = t.row_id
    WHERE t.run IN ($run, $baseline) AND t.source_row_id IS NULL
      AND ($iterations IS NULL OR list_contains($iterations, t.iteration))
      AND ($ranks IS NULL OR list_contains($ranks, t.rank))
),
side AS (
    SELECT k.*,
           row_number() OVER (PARTITION BY run, rank, iteration, op_name, io, arg_key
                              ORDER BY timestamp_us NULLS LAST, graph_id, exec_index NULLS LAST, row_id)
               AS occurrence
    FROM keyed k
),
a AS (
    SELECT s.*, coalesce(m.baseline_op_name, s.op_name) AS match_name FROM side s
    LEFT JOIN compare_mapping m ON m.op_name = s.op_name
    WHERE s.run = $run
),
b AS (SELECT * FROM side WHERE run = $baseline),
pairs AS (
    SELECT coalesce(a.rank, b.rank) AS rank, coalesce(a.graph_id, b.graph_id) AS graph_id,
           coalesce(a.iteration, b.iteration) AS iteration, coalesce(a.exec_index, b.exec_index) AS exec_index,
           coalesce(a.timestamp_us, b.timestamp_us) AS timestamp_us,
           coalesce(a.occurrence, b.occurrence) AS occurrence,
           coalesce(a.op_type, b.op_type) AS op_type, coalesce(a.op_name, b.op_name) AS op_name,
           coalesce(a.io, b.io) AS io, coalesce(a.slot, b.slot) AS slot,
           a.row_id, b.row_id AS baseline_row_id, a.dtype, b.dtype AS baseline_dtype,
           a.shape, b.shape AS baseline_shape,
           a.path AS path, a.data_offset, a.stored_dtype, a.format, a.host_shape,
           b.path AS baseline_path, b.data_offset AS baseline_data_offset,
           b.stored_dtype AS baseline_stored_dtype, b.format AS baseline_format,
           b.host_shape AS baseline_host_shape
    FROM a FULL OUTER JOIN b
      ON a.rank = b.rank AND a.iteration IS NOT DISTINCT FROM b.iteration AND a.match_name = b.op_name
     AND a.io = b.io AND a.arg_key = b.arg_key AND a.occurrence = b.occurrence
)
SELECT p.* FROM pairs p
WHERE NOT EXISTS (
    SELECT 1 FROM raw_comparisons c
    WHERE c.run = $run AND c.baseline_run = $baseline
      AND c.row_id IS NOT DISTINCT FROM p.row_id AND c.baseline_row_id IS NOT DISTINCT FROM p.baseline_row_id
)
ORDER BY p.rank, p.iteration, p.timestamp_us NULLS LAST, p.graph_id, p.exec_index NULLS LAST, p.op_name, p.io, p.slot
