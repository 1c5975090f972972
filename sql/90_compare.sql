-- Run-vs-run comparison.
--
-- comparisons: what `dumpcat compare RUN BASELINE` computed from the tensor data, one row per pair of
-- tensors matched on rank, iteration, operator, io, slot and occurrence, and one per tensor present
-- in one run only (the other side's row id NULL, status 'only_in_run' / 'only_in_baseline').
-- Metric definitions and NaN conventions: ingest/compare_metrics.py and docs/views.md.
CREATE OR REPLACE VIEW comparisons AS
SELECT run, baseline_run, rank, graph_id, iteration, exec_index, op_type, op_name, io, slot, row_id,
       baseline_row_id, cosine, max_abs_err, max_rel_err, mean_abs_err, rmse, rel_euclidean, kl_div,
       acc_rel_err, err_ratio_1e3, err_ratio_5e3, status, dtype, baseline_dtype, shape, baseline_shape,
       numel, occurrence, timestamp_us, compared_at
FROM raw_comparisons;

-- first_divergence(...): per run pair, rank and iteration, the first output (in execution order, as
-- first_anomaly orders a step) whose comparison exceeds the tolerances, with its source line.
--   cosine_min  flag when cosine < cosine_min          (default 0.99, msprobe's threshold)
--   max_abs     flag when max_abs_err > max_abs        (default 0.001, msprobe's threshold)
--   max_rel     flag when max_rel_err > max_rel        (default NULL: not checked)
--   inputs      also consider inputs                   (default false)
--   unmatched   also consider tensors of one run only  (default false)
-- A pair whose status is not 'ok' or 'unsupported' (shapes differ, NaN on one side, unreadable) is
-- flagged whatever the tolerances, and so is 'nan_in_both' when the NaN stand at different places;
-- `reason` says why.
CREATE OR REPLACE MACRO first_divergence(cosine_min := 0.99, max_abs := 0.001, max_rel := NULL,
                                         inputs := false, unmatched := false) AS TABLE
WITH flagged AS (
    SELECT c.*,
           CASE WHEN c.status IN ('only_in_run', 'only_in_baseline') THEN c.status
                -- NaN/Inf at the same places in both runs count as equal (msprobe): the metrics
                -- of the rest decide; at different places (no metrics) the pair diverges
                WHEN c.status NOT IN ('ok', 'unsupported', 'nan_in_both') THEN c.status
                WHEN c.status = 'nan_in_both' AND c.max_abs_err IS NULL THEN c.status
                WHEN c.cosine < cosine_min THEN 'cosine < ' || cosine_min
                WHEN c.max_abs_err > max_abs THEN 'max_abs_err > ' || max_abs
                WHEN c.max_rel_err > max_rel THEN 'max_rel_err > ' || max_rel
           END AS reason
    FROM comparisons c
    WHERE (inputs OR c.io = 'output')
      AND (unmatched OR c.status NOT IN ('only_in_run', 'only_in_baseline'))
),
firsts AS (
    SELECT DISTINCT ON (run, baseline_run, rank, iteration) *
    FROM flagged
    WHERE reason IS NOT NULL
    ORDER BY run, baseline_run, rank, iteration, io <> 'output', timestamp_us NULLS LAST, graph_id,
             exec_index NULLS LAST, slot
)
SELECT f.run, f.baseline_run, f.rank, f.iteration, f.graph_id, f.exec_index, f.op_type, f.op_name, f.io,
       f.slot, f.reason, f.status, f.cosine, f.max_abs_err, f.max_rel_err, f.mean_abs_err, f.rmse,
       f.rel_euclidean, f.kl_div, os.source_file, os.source_line, os.source_code, f.row_id, f.baseline_row_id
FROM firsts f
LEFT JOIN op_source os
       ON os.run = f.run AND os.rank = f.rank AND os.graph_id IS NOT DISTINCT FROM f.graph_id
      AND os.full_name = f.op_name;

-- |x - y| / |y| with msprobe's special cases (CalcStatsDiff): equal values (equal infinities too)
-- give 0, y = 0 gives +Inf, a NaN on either side NaN (which sorts above every number: a NaN
-- difference counts as a divergence).
CREATE OR REPLACE MACRO dumpcat_rel_diff(x, y) AS
    CASE WHEN x IS NULL OR y IS NULL THEN NULL
         WHEN x = y THEN 0.0  -- also equal infinities
         WHEN isnan(x) OR isnan(y) THEN 'NaN'::DOUBLE
         WHEN y = 0 THEN CASE WHEN x = 0 THEN 0.0 ELSE 'Infinity'::DOUBLE END
         ELSE abs((x - y) / y) END;

-- compare_stats(run_name, baseline_name): the two runs' statistics side by side, for dumps without
-- tensor data (msprobe task 'statistics', statistic.csv, CANN stats CSV). Rows match on rank,
-- iteration, operator, io, argument (its name where the producer names it, else its slot) and
-- occurrence. `*_diff` is run minus baseline;
-- `*_rel_diff` is |diff / baseline| as msprobe computes it (+Inf when the baseline is 0 and the diff
-- is not, NaN when either side is NaN).
CREATE OR REPLACE MACRO compare_stats(run_name, baseline_name) AS TABLE
WITH s AS (
    SELECT st.*,
           -- the argument: its name where the producer names it (msprobe: the order of a module's
           -- parameters_grad entries differs between runs), else its slot
           coalesce(st.arg_path, 'slot ' || st.slot) AS arg_key,
           row_number() OVER (PARTITION BY run, rank, iteration, op_name, io, coalesce(st.arg_path, 'slot ' || st.slot)
                              ORDER BY timestamp_us NULLS LAST, graph_id, exec_index NULLS LAST, stat_id)
               AS occurrence
    FROM stats st
    WHERE st.run IN (run_name, baseline_name)
),
a AS (SELECT * FROM s WHERE run = run_name),
b AS (SELECT * FROM s WHERE run = baseline_name),
joined AS (
    SELECT coalesce(a.rank, b.rank) AS rank, coalesce(a.iteration, b.iteration) AS iteration,
           coalesce(a.exec_index, b.exec_index) AS exec_index, coalesce(a.timestamp_us, b.timestamp_us) AS timestamp_us,
           coalesce(a.graph_id, b.graph_id) AS graph_id,
           coalesce(a.op_type, b.op_type) AS op_type, coalesce(a.op_name, b.op_name) AS op_name,
           coalesce(a.io, b.io) AS io, coalesce(a.slot, b.slot) AS slot,
           coalesce(a.arg_path, b.arg_path) AS arg_path, coalesce(a.occurrence, b.occurrence) AS occurrence,
           a.dtype, b.dtype AS baseline_dtype, a.shape, b.shape AS baseline_shape,
           a.max, b.max AS baseline_max, a.min, b.min AS baseline_min, a.avg, b.avg AS baseline_avg,
           a.l2norm, b.l2norm AS baseline_l2norm, a.has_nan, b.has_nan AS baseline_has_nan,
           a.row_id, b.row_id AS baseline_row_id, a.stat_id, b.stat_id AS baseline_stat_id,
           a.source_file, a.source_line, a.source_code,
           CASE WHEN b.op_name IS NULL THEN 'only_in_run' WHEN a.op_name IS NULL THEN 'only_in_baseline'
                WHEN a.shape IS DISTINCT FROM b.shape THEN 'shape_mismatch'
                WHEN a.has_nan AND b.has_nan THEN 'nan_in_both'
                WHEN a.has_nan THEN 'nan_in_run' WHEN b.has_nan THEN 'nan_in_baseline'
                ELSE 'ok' END AS status
    FROM a FULL OUTER JOIN b
      ON a.rank = b.rank AND a.iteration IS NOT DISTINCT FROM b.iteration AND a.op_name = b.op_name
     AND a.io = b.io AND a.arg_key = b.arg_key AND a.occurrence = b.occurrence
)
SELECT *,
       max - baseline_max AS max_diff, min - baseline_min AS min_diff, avg - baseline_avg AS avg_diff,
       l2norm - baseline_l2norm AS l2norm_diff,
       dumpcat_rel_diff(max, baseline_max) AS max_rel_diff, dumpcat_rel_diff(min, baseline_min) AS min_rel_diff,
       dumpcat_rel_diff(avg, baseline_avg) AS avg_rel_diff,
       dumpcat_rel_diff(l2norm, baseline_l2norm) AS l2norm_rel_diff
FROM joined;

-- first_stat_divergence(run_name, baseline_name, max_rel := 0.01): per rank and iteration, the first
-- output (execution order) whose statistics part: NaN in one run only, shapes that differ, or a
-- relative difference of max, min, mean or L2 norm above max_rel.
CREATE OR REPLACE MACRO first_stat_divergence(run_name, baseline_name, max_rel := 0.01) AS TABLE
SELECT DISTINCT ON (rank, iteration)
       run_name AS run, baseline_name AS baseline_run, rank, iteration, graph_id, exec_index, op_type, op_name,
       io, slot, arg_path, status, max_rel_diff, min_rel_diff, avg_rel_diff, l2norm_rel_diff,
       source_file, source_line, source_code, row_id, baseline_row_id, stat_id, baseline_stat_id
FROM compare_stats(run_name, baseline_name)
WHERE io = 'output' AND status NOT IN ('only_in_run', 'only_in_baseline', 'nan_in_both')
  AND (status <> 'ok' OR greatest(max_rel_diff, min_rel_diff, avg_rel_diff, l2norm_rel_diff) > max_rel)
ORDER BY rank, iteration, timestamp_us NULLS LAST, graph_id, exec_index NULLS LAST, slot;
