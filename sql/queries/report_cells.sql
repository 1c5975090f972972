-- `dumpcat report`: the run aggregated once into cells of (rank, iteration, operator), kept as the
-- temporary table `report_cells` that the heat map, the trend lines and the operator order read.
--
-- Rows: the outputs of $run (msprobe's `parameter`/`parameter_grad` rows too; a dump of inputs
-- only falls back to its inputs), outside `constants/`.
-- pos: where the operator's first output stands in its step, ordered as first_anomaly orders a
--      step (file timestamp, then graph id, execution index, slot).
-- is_first: the operator is the step's first anomaly (`report_first`).
-- l2norm, max, min: the finite values only (the largest l2norm and max, the smallest min of the
--      operator's outputs); `nonfinite` says a value was NaN or ±Inf.
WITH rows AS (
    SELECT rank, iteration, op_name, op_type, has_nan, has_inf, nan_count, neg_inf_count, pos_inf_count,
           l2norm, max, min,
           row_number() OVER (PARTITION BY rank, iteration
                              ORDER BY timestamp_us NULLS LAST, graph_id, exec_index NULLS LAST, slot) AS pos
    FROM stats
    WHERE run = $run AND iteration IS NOT NULL
      AND (io <> 'input'
           OR NOT EXISTS (SELECT 1 FROM stats WHERE run = $run AND io <> 'input' AND iteration IS NOT NULL))
)
SELECT c.rank, c.iteration, c.op_name, any_value(c.op_type) AS op_type,
       count(*) AS tensors,
       count(*) FILTER (WHERE c.has_nan OR c.has_inf) AS anomalous,
       coalesce(sum(c.nan_count), 0) AS nan_elements,
       coalesce(sum(c.neg_inf_count), 0) + coalesce(sum(c.pos_inf_count), 0) AS inf_elements,
       min(c.pos) AS pos,
       max(c.l2norm) FILTER (WHERE isfinite(c.l2norm)) AS l2norm,
       max(c.max) FILTER (WHERE isfinite(c.max)) AS max,
       min(c.min) FILTER (WHERE isfinite(c.min)) AS min,
       coalesce(bool_or(NOT (isfinite(c.l2norm) AND isfinite(c.max) AND isfinite(c.min))), false) AS nonfinite,
       bool_or(f.op_name IS NOT NULL) AS is_first
FROM rows c
LEFT JOIN report_first f ON f.rank = c.rank AND f.iteration = c.iteration AND f.op_name = c.op_name
GROUP BY c.rank, c.iteration, c.op_name;
