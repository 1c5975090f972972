-- Watch conditions: MindInsight's debugger watchpoints as table macros over `stats`.
--
-- Sources (MindInsight, Apache-2.0, read for the list, parameter names and meanings; no code taken):
--   mindinsight/debugger/conditionmgr/condition_list.py  CONDITION_LIST: the 18 conditions, their
--       parameters, defaults and target types (weight, gradient, activation, tensor);
--   mindinsight/debugger/conditionmgr/condition.py       ConditionIdEnum, parameter checks
--       (percentages 0..100, "abs" parameters 0 <= v < inf, others finite), initialization only at
--       step 0;
--   mindinsight/debugger/api/conditions.py               the offline API (TensorTooLarge/Small,
--       TensorRange, TensorOverflow, OperatorOverflow, TensorAllZero, TensorUnchanged,
--       TensorChangeAbove/BelowThreshold): "a WatchpointHit happens for the parameters the tensor
--       triggered" (parameters combine with OR), unchanged = allclose(current, previous, rtol, atol),
--       change ratio = abs_mean(current - previous) / (abs_mean(previous) + epsilon), and hits carry
--       error codes "Tensor contains NaN." / "A tensor contains +/-INF." instead of a value.
--
-- Every macro returns the same columns, so results can be UNION ALLed:
--   run, rank, graph_id, iteration, exec_index, op_type, op_name, io, slot, row_id, source_file,
--   source_line, target, stat_semantics, max, min, avg, l2norm, count, zero_count, nan_count,
--   neg_inf_count, pos_inf_count, prev_iteration, prev_row_id, condition, certain, detail
-- `condition` names the MindInsight condition, `detail` says which parameter fired and with what
-- values, and `certain` says whether the row meets the condition for sure (TRUE) or only may meet it
-- (FALSE): some definitions need the elements themselves (the mean of |x|, the elements in a range,
-- the element-wise difference of two iterations) and statistics only bound them. Those macros compute
-- exact bounds from the statistics and return every tensor the bounds cannot rule out, so they never
-- miss a hit; a FALSE row needs the data (`Catalog.tensor(row_id)`) to decide. Bounds use
--   |avg| <= mean|x| <= min(max(|max|, |min|), l2norm / sqrt(n)),  mean|x| >= l2norm^2 / (n max|x|),
-- and mean|x| = avg (min >= 0) or -avg (max <= 0) exactly; n is `count`, else the product of `shape`.
-- They hold for exact statistics; values a producer stored rounded (float32 in statistic.csv or
-- dump.json) can move a bound by that rounding.
--
-- Targets (MindInsight's TargetTypeEnum), in `target`:
--   weight     MindSpore `op_type = 'Parameter'`; msprobe io 'parameter'
--   gradient   MindSpore outputs of operators whose full name starts with 'Gradients/'; msprobe io
--              'parameter_grad' and outputs of backward entries (name ending '.backward' or holding
--              '.backward.')
--   activation outputs of ReLU, Sigmoid and Tanh (MindInsight's ActivationFuncEnum), any case
--   tensor     every other tensor; a `tensor` condition watches every tensor whatever its target
-- GE/CANN statistics carry no parameter or gradient marks: they are only `tensor`.
--
-- NaN and Inf: a tensor known to hold NaN or +-Inf (`has_nan` / `has_inf`) is only reported by the
-- overflow conditions (watch_nan_inf, watch_tensor_overflow, watch_weight_overflow,
-- watch_gradient_exploding); every value condition leaves it out, as MindInsight reports such a tensor
-- as a check error, not a hit. Rows whose has_nan/has_inf is NULL (a CANN row without counts or avg)
-- are evaluated on the statistics they have, and a statistic that is NaN never fires (DuckDB orders
-- NaN above every number; the macros compare only finite statistics).
--
-- Statistics a row lacks (NULL: e.g. v2.3+ default statistic.csv has max, min and l2norm only, GE's
-- stats may lack l2norm) give no bound: a parameter that needs one is then undecided, or, when no
-- bound at all exists, the row is not returned for that parameter.
--
-- Bad parameters raise an error naming the parameter (values out of MindInsight's ranges, a threshold
-- condition with no threshold, a range percentage without both range ends, an unknown target_type);
-- a value of the wrong type raises DuckDB's conversion error.

-- watch_require(ok, message): TRUE, or an error with the message. Checks of macro parameters.
CREATE OR REPLACE MACRO watch_require(ok, message) AS
    CASE WHEN ok THEN true ELSE error(message) END;

-- watch_stats: `stats` with the target, the element count n, whether the tensor is known to hold
-- NaN/Inf, and the bounds of mean|x| (abs_mean_lo <= mean|x| <= abs_mean_hi; equal when exact).
CREATE OR REPLACE VIEW watch_stats AS
WITH s AS (
    SELECT st.*,
           CASE WHEN st.io = 'parameter' OR (st.op_type = 'Parameter' AND st.arg_path IS NULL) THEN 'weight'
                WHEN st.io = 'parameter_grad'
                  OR (st.io = 'output' AND st.arg_path IS NULL AND st.op_name LIKE 'Gradients/%')
                  OR (st.io = 'output' AND st.arg_path IS NOT NULL
                      AND (st.op_name LIKE '%.backward' OR st.op_name LIKE '%.backward.%')) THEN 'gradient'
                WHEN st.io = 'output' AND lower(st.op_type) IN ('relu', 'sigmoid', 'tanh') THEN 'activation'
                ELSE 'tensor' END AS target,
           coalesce(st.count, CASE WHEN array_length(st.shape) = 0 THEN 1 ELSE list_product(st.shape)::BIGINT END) AS n,
           coalesce(st.has_nan, false) OR coalesce(st.has_inf, false) AS nonfinite,
           greatest(abs(st.max), abs(st.min)) AS absmax
    FROM stats st
)
SELECT s.*,
       CASE WHEN s.min >= 0 AND isfinite(s.avg) THEN s.avg
            WHEN s.max <= 0 AND isfinite(s.avg) THEN -s.avg
            ELSE greatest(abs(s.avg), CASE WHEN s.absmax > 0 AND s.n > 0 THEN s.l2norm * s.l2norm / (s.n * s.absmax) END)
       END AS abs_mean_lo,
       CASE WHEN s.min >= 0 AND isfinite(s.avg) THEN s.avg
            WHEN s.max <= 0 AND isfinite(s.avg) THEN -s.avg
            ELSE least(s.absmax, CASE WHEN s.n > 0 THEN s.l2norm / sqrt(s.n) END)
       END AS abs_mean_hi
FROM s;

-- watch_pairs: each row of watch_stats with the same tensor (run, rank, graph_id, op_name, io, slot)
-- at the previous iteration present (prev_*). A tensor dumped several times in one iteration (a loop
-- body) is compared with the last dump of the previous iteration; dumps within one iteration are not
-- compared with each other (prev_iteration < iteration filters them). Constants (iteration NULL) have
-- no pairs.
CREATE OR REPLACE VIEW watch_pairs AS
SELECT w.*,
       lag(w.iteration) OVER k AS prev_iteration, lag(w.row_id) OVER k AS prev_row_id,
       lag(w.max) OVER k AS prev_max, lag(w.min) OVER k AS prev_min, lag(w.avg) OVER k AS prev_avg,
       lag(w.l2norm) OVER k AS prev_l2norm, lag(w.n) OVER k AS prev_n, lag(w.md5) OVER k AS prev_md5,
       lag(w.nonfinite) OVER k AS prev_nonfinite, lag(w.has_nan) OVER k AS prev_has_nan,
       lag(w.absmax) OVER k AS prev_absmax,
       lag(w.abs_mean_lo) OVER k AS prev_abs_mean_lo, lag(w.abs_mean_hi) OVER k AS prev_abs_mean_hi
FROM watch_stats w
WHERE w.iteration IS NOT NULL
WINDOW k AS (PARTITION BY w.run, w.rank, w.graph_id, w.op_name, w.io, w.slot
             ORDER BY w.iteration, w.timestamp_us NULLS LAST, w.stat_id NULLS LAST, w.row_id NULLS LAST);

-- watch_nonfinite(target_type := 'tensor', nan := true, inf := true, l2norm_gt := NULL,
--                 condition_name := NULL): tensors of the target holding NaN (nan) or +-Inf (inf), by
-- `has_nan` / `has_inf`; with l2norm_gt also those whose finite l2norm exceeds it. Exact under every
-- stat_semantics wherever has_nan/has_inf is known; a CANN row without counts or avg (has_nan NULL)
-- is not returned for NaN (it can still hit Inf by max/min). The generic form of the overflow
-- conditions below.
CREATE OR REPLACE MACRO watch_nonfinite(target_type := 'tensor', nan := true, inf := true, l2norm_gt := NULL,
                                        condition_name := NULL) AS TABLE
WITH p AS (
    SELECT watch_require(target_type IN ('tensor', 'weight', 'gradient', 'activation'),
                         'target_type must be tensor, weight, gradient or activation, got ' || coalesce(target_type::VARCHAR, 'NULL'))
       AND watch_require(l2norm_gt IS NULL OR (CAST(l2norm_gt AS DOUBLE) >= 0 AND isfinite(CAST(l2norm_gt AS DOUBLE))),
                         'l2norm_gt must be a finite number >= 0, got ' || l2norm_gt::VARCHAR)
       AND watch_require(CAST(nan AS BOOLEAN) IS NOT NULL AND CAST(inf AS BOOLEAN) IS NOT NULL,
                         'nan and inf must be true or false') AS ok
), h AS (
    SELECT w.*,
           CAST(nan AS BOOLEAN) AND coalesce(w.has_nan, false) AS hit_nan,
           CAST(inf AS BOOLEAN) AND coalesce(w.has_inf, false) AS hit_inf,
           l2norm_gt IS NOT NULL AND isfinite(w.l2norm) AND w.l2norm > l2norm_gt AS hit_l2
    FROM watch_stats w, p
    WHERE p.ok AND (target_type = 'tensor' OR w.target = target_type)
)
SELECT run, rank, graph_id, iteration, exec_index, op_type, op_name, io, slot, row_id, source_file,
       source_line, target, stat_semantics, max, min, avg, l2norm, count, zero_count, nan_count,
       neg_inf_count, pos_inf_count, CAST(NULL AS BIGINT) AS prev_iteration, CAST(NULL AS BIGINT) AS prev_row_id,
       coalesce(condition_name, 'nan_inf') AS condition, true AS certain,
       concat_ws('; ',
                 CASE WHEN hit_nan THEN 'holds NaN' || coalesce(' (nan_count ' || nan_count || ')', '') END,
                 CASE WHEN hit_inf THEN 'holds Inf' || coalesce(' (-inf ' || neg_inf_count || ', +inf ' || pos_inf_count || ')', '') END,
                 CASE WHEN hit_l2 THEN printf('l2norm %g > l2norm_gt %g', l2norm, l2norm_gt::DOUBLE) END) AS detail
FROM h
WHERE hit_nan OR hit_inf OR hit_l2
-- a bad parameter raises its error even when the optimizer has proved the result above empty
UNION ALL BY NAME SELECT CAST(NULL AS VARCHAR) AS run FROM p WHERE NOT p.ok;

-- watch_values(target_type := 'tensor', abs_mean_gt, max_gt, min_gt, mean_gt, l2norm_gt, abs_mean_lt,
--              max_lt, min_lt, mean_lt, l2norm_lt := NULL, condition_name := NULL): tensors whose
-- statistic passes a threshold; any given parameter fires (OR). max/min/mean(avg)/l2norm thresholds are
-- exact. abs_mean (mean of |x|) is in no producer's statistics: exact when min >= 0 or max <= 0 (then
-- it is |avg|), otherwise bounded (header); a row the bounds cannot decide is returned with
-- certain = FALSE. Generic form of tensor/weight/gradient too large / too small.
CREATE OR REPLACE MACRO watch_values(target_type := 'tensor', abs_mean_gt := NULL, max_gt := NULL, min_gt := NULL,
                                     mean_gt := NULL, l2norm_gt := NULL, abs_mean_lt := NULL, max_lt := NULL,
                                     min_lt := NULL, mean_lt := NULL, l2norm_lt := NULL,
                                     condition_name := NULL) AS TABLE
WITH p AS (
    SELECT watch_require(target_type IN ('tensor', 'weight', 'gradient', 'activation'),
                         'target_type must be tensor, weight, gradient or activation, got ' || coalesce(target_type::VARCHAR, 'NULL'))
       AND watch_require(coalesce(abs_mean_gt, max_gt, min_gt, mean_gt, l2norm_gt, abs_mean_lt, max_lt, min_lt,
                                  mean_lt, l2norm_lt) IS NOT NULL,
                         coalesce(condition_name, 'watch_values') || ': give at least one threshold parameter')
       AND watch_require(abs_mean_gt IS NULL OR (CAST(abs_mean_gt AS DOUBLE) >= 0 AND isfinite(CAST(abs_mean_gt AS DOUBLE))),
                         'abs_mean_gt must be a finite number >= 0, got ' || abs_mean_gt::VARCHAR)
       AND watch_require(abs_mean_lt IS NULL OR (CAST(abs_mean_lt AS DOUBLE) >= 0 AND isfinite(CAST(abs_mean_lt AS DOUBLE))),
                         'abs_mean_lt must be a finite number >= 0, got ' || abs_mean_lt::VARCHAR)
       AND watch_require(l2norm_gt IS NULL OR (CAST(l2norm_gt AS DOUBLE) >= 0 AND isfinite(CAST(l2norm_gt AS DOUBLE))),
                         'l2norm_gt must be a finite number >= 0, got ' || l2norm_gt::VARCHAR)
       AND watch_require(l2norm_lt IS NULL OR (CAST(l2norm_lt AS DOUBLE) >= 0 AND isfinite(CAST(l2norm_lt AS DOUBLE))),
                         'l2norm_lt must be a finite number >= 0, got ' || l2norm_lt::VARCHAR)
       AND watch_require(max_gt IS NULL OR isfinite(CAST(max_gt AS DOUBLE)), 'max_gt must be a finite number, got ' || max_gt::VARCHAR)
       AND watch_require(min_gt IS NULL OR isfinite(CAST(min_gt AS DOUBLE)), 'min_gt must be a finite number, got ' || min_gt::VARCHAR)
       AND watch_require(mean_gt IS NULL OR isfinite(CAST(mean_gt AS DOUBLE)), 'mean_gt must be a finite number, got ' || mean_gt::VARCHAR)
       AND watch_require(max_lt IS NULL OR isfinite(CAST(max_lt AS DOUBLE)), 'max_lt must be a finite number, got ' || max_lt::VARCHAR)
       AND watch_require(min_lt IS NULL OR isfinite(CAST(min_lt AS DOUBLE)), 'min_lt must be a finite number, got ' || min_lt::VARCHAR)
       AND watch_require(mean_lt IS NULL OR isfinite(CAST(mean_lt AS DOUBLE)), 'mean_lt must be a finite number, got ' || mean_lt::VARCHAR)
       AS ok
), h AS (
    SELECT w.*,
           coalesce(isfinite(w.max) AND w.max > max_gt, false) AS h_max_gt,
           coalesce(isfinite(w.min) AND w.min > min_gt, false) AS h_min_gt,
           coalesce(isfinite(w.avg) AND w.avg > mean_gt, false) AS h_mean_gt,
           coalesce(isfinite(w.l2norm) AND w.l2norm > l2norm_gt, false) AS h_l2_gt,
           coalesce(isfinite(w.max) AND w.max < max_lt, false) AS h_max_lt,
           coalesce(isfinite(w.min) AND w.min < min_lt, false) AS h_min_lt,
           coalesce(isfinite(w.avg) AND w.avg < mean_lt, false) AS h_mean_lt,
           coalesce(isfinite(w.l2norm) AND w.l2norm < l2norm_lt, false) AS h_l2_lt,
           coalesce(w.abs_mean_lo > abs_mean_gt, false) AS c_abs_gt,
           coalesce(w.abs_mean_hi > abs_mean_gt, false) AS m_abs_gt,
           coalesce(w.abs_mean_hi < abs_mean_lt, false) AS c_abs_lt,
           coalesce(w.abs_mean_lo < abs_mean_lt, false) AS m_abs_lt
    FROM watch_stats w, p
    WHERE p.ok AND (target_type = 'tensor' OR w.target = target_type) AND NOT w.nonfinite
)
SELECT run, rank, graph_id, iteration, exec_index, op_type, op_name, io, slot, row_id, source_file,
       source_line, target, stat_semantics, max, min, avg, l2norm, count, zero_count, nan_count,
       neg_inf_count, pos_inf_count, CAST(NULL AS BIGINT) AS prev_iteration, CAST(NULL AS BIGINT) AS prev_row_id,
       coalesce(condition_name, 'values') AS condition,
       h_max_gt OR h_min_gt OR h_mean_gt OR h_l2_gt OR h_max_lt OR h_min_lt OR h_mean_lt OR h_l2_lt
           OR c_abs_gt OR c_abs_lt AS certain,
       concat_ws('; ',
                 CASE WHEN c_abs_gt THEN printf('abs_mean >= %g > abs_mean_gt %g', abs_mean_lo, abs_mean_gt::DOUBLE)
                      WHEN m_abs_gt THEN printf('abs_mean in [%g, %g], abs_mean_gt %g: undecided from statistics',
                                                abs_mean_lo, abs_mean_hi, abs_mean_gt::DOUBLE) END,
                 CASE WHEN h_max_gt THEN printf('max %g > max_gt %g', max, max_gt::DOUBLE) END,
                 CASE WHEN h_min_gt THEN printf('min %g > min_gt %g', min, min_gt::DOUBLE) END,
                 CASE WHEN h_mean_gt THEN printf('mean %g > mean_gt %g', avg, mean_gt::DOUBLE) END,
                 CASE WHEN h_l2_gt THEN printf('l2norm %g > l2norm_gt %g', l2norm, l2norm_gt::DOUBLE) END,
                 CASE WHEN c_abs_lt THEN printf('abs_mean <= %g < abs_mean_lt %g', abs_mean_hi, abs_mean_lt::DOUBLE)
                      WHEN m_abs_lt THEN printf('abs_mean in [%g, %g], abs_mean_lt %g: undecided from statistics',
                                                abs_mean_lo, abs_mean_hi, abs_mean_lt::DOUBLE) END,
                 CASE WHEN h_max_lt THEN printf('max %g < max_lt %g', max, max_lt::DOUBLE) END,
                 CASE WHEN h_min_lt THEN printf('min %g < min_lt %g', min, min_lt::DOUBLE) END,
                 CASE WHEN h_mean_lt THEN printf('mean %g < mean_lt %g', avg, mean_lt::DOUBLE) END,
                 CASE WHEN h_l2_lt THEN printf('l2norm %g < l2norm_lt %g', l2norm, l2norm_lt::DOUBLE) END) AS detail
FROM h
WHERE h_max_gt OR h_min_gt OR h_mean_gt OR h_l2_gt OR h_max_lt OR h_min_lt OR h_mean_lt OR h_l2_lt
   OR m_abs_gt OR m_abs_lt
-- a bad parameter raises its error even when the optimizer has proved the result above empty
UNION ALL BY NAME SELECT CAST(NULL AS VARCHAR) AS run FROM p WHERE NOT p.ok;

-- watch_zero(target_type := 'tensor', zero_percentage_ge := 100, max_gt := NULL, min_lt := NULL,
--            first_iteration_only := false, condition_name := NULL): tensors whose percentage of
-- zero elements (100 * zero_count / n) is >= zero_percentage_ge, or (initialization) whose max > max_gt
-- or min < min_lt. Exact with zero_count (statistic.csv "Zero Count", dumpcat's computed statistics,
-- msprobe tensors saved with data). Without it: 100% when max = min = 0 and the tensor holds no NaN,
-- 0% when min > 0 or max < 0, otherwise between 0 and 100 (n - 1) / n: undecided rows are returned with
-- certain = FALSE. first_iteration_only keeps each tensor's first dumped iteration (MindInsight
-- offers the initialization conditions at step 0 only). Generic form of all zero / initialization.
CREATE OR REPLACE MACRO watch_zero(target_type := 'tensor', zero_percentage_ge := 100, max_gt := NULL,
                                   min_lt := NULL, first_iteration_only := false, condition_name := NULL) AS TABLE
WITH p AS (
    SELECT watch_require(target_type IN ('tensor', 'weight', 'gradient', 'activation'),
                         'target_type must be tensor, weight, gradient or activation, got ' || coalesce(target_type::VARCHAR, 'NULL'))
       AND watch_require(zero_percentage_ge IS NULL OR CAST(zero_percentage_ge AS DOUBLE) BETWEEN 0 AND 100,
                         'zero_percentage_ge must be a percentage between 0 and 100, got ' || zero_percentage_ge::VARCHAR)
       AND watch_require(max_gt IS NULL OR isfinite(CAST(max_gt AS DOUBLE)), 'max_gt must be a finite number, got ' || max_gt::VARCHAR)
       AND watch_require(min_lt IS NULL OR isfinite(CAST(min_lt AS DOUBLE)), 'min_lt must be a finite number, got ' || min_lt::VARCHAR)
       AND watch_require(coalesce(zero_percentage_ge, max_gt, min_lt) IS NOT NULL,
                         coalesce(condition_name, 'watch_zero') || ': give at least one threshold parameter')
       AND watch_require(CAST(first_iteration_only AS BOOLEAN) IS NOT NULL, 'first_iteration_only must be true or false')
       AS ok
), w AS (
    SELECT ws.*,
           min(ws.iteration) OVER (PARTITION BY ws.run, ws.rank, ws.graph_id, ws.op_name, ws.io, ws.slot) AS first_iteration
    FROM watch_stats ws, p
    WHERE p.ok AND (target_type = 'tensor' OR ws.target = target_type) AND NOT ws.nonfinite
), z AS (
    SELECT w.*,
           CASE WHEN w.zero_count IS NOT NULL AND w.n > 0 THEN 100.0 * w.zero_count / w.n
                WHEN w.max = 0 AND w.min = 0 AND w.has_nan = false THEN 100.0
                WHEN w.min > 0 OR w.max < 0 THEN 0.0
                WHEN w.n > 0 THEN 0.0 END AS zp_lo,
           CASE WHEN w.zero_count IS NOT NULL AND w.n > 0 THEN 100.0 * w.zero_count / w.n
                WHEN w.max = 0 AND w.min = 0 AND w.has_nan = false THEN 100.0
                WHEN w.min > 0 OR w.max < 0 THEN 0.0
                WHEN w.n > 0 AND (w.max > 0 OR w.min < 0) THEN 100.0 * (w.n - 1) / w.n
                WHEN w.n > 0 THEN 100.0 END AS zp_hi
    FROM w
    WHERE NOT CAST(first_iteration_only AS BOOLEAN) OR w.iteration = w.first_iteration
), h AS (
    SELECT z.*,
           coalesce(zp_lo >= zero_percentage_ge, false) AS c_zero,
           coalesce(zp_hi >= zero_percentage_ge, false) AS m_zero,
           coalesce(isfinite(z.max) AND z.max > max_gt, false) AS h_max_gt,
           coalesce(isfinite(z.min) AND z.min < min_lt, false) AS h_min_lt
    FROM z
)
SELECT run, rank, graph_id, iteration, exec_index, op_type, op_name, io, slot, row_id, source_file,
       source_line, target, stat_semantics, max, min, avg, l2norm, count, zero_count, nan_count,
       neg_inf_count, pos_inf_count, CAST(NULL AS BIGINT) AS prev_iteration, CAST(NULL AS BIGINT) AS prev_row_id,
       coalesce(condition_name, 'zero') AS condition,
       c_zero OR h_max_gt OR h_min_lt AS certain,
       concat_ws('; ',
                 CASE WHEN c_zero THEN printf('zero percentage %g >= zero_percentage_ge %g', zp_lo, zero_percentage_ge::DOUBLE)
                      WHEN m_zero THEN printf('zero percentage in [%g, %g], zero_percentage_ge %g: undecided from statistics (no zero_count)',
                                              zp_lo, zp_hi, zero_percentage_ge::DOUBLE) END,
                 CASE WHEN h_max_gt THEN printf('max %g > max_gt %g', max, max_gt::DOUBLE) END,
                 CASE WHEN h_min_lt THEN printf('min %g < min_lt %g', min, min_lt::DOUBLE) END) AS detail
FROM h
WHERE m_zero OR h_max_gt OR h_min_lt
-- a bad parameter raises its error even when the optimizer has proved the result above empty
UNION ALL BY NAME SELECT CAST(NULL AS VARCHAR) AS run FROM p WHERE NOT p.ok;

-- watch_range(target_type := 'tensor', range_start_inclusive, range_end_inclusive, range_percentage_lt,
--             range_percentage_gt, max_min_lt, max_min_gt := NULL, condition_name := NULL): the
-- percentage P of elements in [range_start_inclusive, range_end_inclusive] is < range_percentage_lt or
-- > range_percentage_gt, or max - min is < max_min_lt or > max_min_gt (OR). max - min is exact. P is
-- exact when [min, max] lies inside the range (100) or outside it (0); otherwise statistics bound it
-- to [0 or 100/n when min or max lies in the range, 100 (n - 1) / n]: undecided rows are returned
-- with certain = FALSE. Generic form of tensor range / activation range.
CREATE OR REPLACE MACRO watch_range(target_type := 'tensor', range_start_inclusive := NULL, range_end_inclusive := NULL,
                                    range_percentage_lt := NULL, range_percentage_gt := NULL, max_min_lt := NULL,
                                    max_min_gt := NULL, condition_name := NULL) AS TABLE
WITH p AS (
    SELECT watch_require(target_type IN ('tensor', 'weight', 'gradient', 'activation'),
                         'target_type must be tensor, weight, gradient or activation, got ' || coalesce(target_type::VARCHAR, 'NULL'))
       AND watch_require(coalesce(range_percentage_lt, range_percentage_gt, max_min_lt, max_min_gt) IS NOT NULL,
                         coalesce(condition_name, 'watch_range')
                         || ': give at least one of range_percentage_lt, range_percentage_gt, max_min_lt, max_min_gt')
       AND watch_require(coalesce(range_percentage_lt, range_percentage_gt) IS NULL
                         OR (range_start_inclusive IS NOT NULL AND range_end_inclusive IS NOT NULL),
                         'range_percentage_lt/gt need both range_start_inclusive and range_end_inclusive')
       AND watch_require(range_start_inclusive IS NULL OR isfinite(CAST(range_start_inclusive AS DOUBLE)),
                         'range_start_inclusive must be a finite number, got ' || range_start_inclusive::VARCHAR)
       AND watch_require(range_end_inclusive IS NULL OR isfinite(CAST(range_end_inclusive AS DOUBLE)),
                         'range_end_inclusive must be a finite number, got ' || range_end_inclusive::VARCHAR)
       AND watch_require(range_start_inclusive IS NULL OR range_end_inclusive IS NULL
                         OR CAST(range_start_inclusive AS DOUBLE) <= CAST(range_end_inclusive AS DOUBLE),
                         'range_start_inclusive must not be above range_end_inclusive')
       AND watch_require(range_percentage_lt IS NULL OR CAST(range_percentage_lt AS DOUBLE) BETWEEN 0 AND 100,
                         'range_percentage_lt must be a percentage between 0 and 100, got ' || range_percentage_lt::VARCHAR)
       AND watch_require(range_percentage_gt IS NULL OR CAST(range_percentage_gt AS DOUBLE) BETWEEN 0 AND 100,
                         'range_percentage_gt must be a percentage between 0 and 100, got ' || range_percentage_gt::VARCHAR)
       AND watch_require(max_min_lt IS NULL OR isfinite(CAST(max_min_lt AS DOUBLE)), 'max_min_lt must be a finite number, got ' || max_min_lt::VARCHAR)
       AND watch_require(max_min_gt IS NULL OR isfinite(CAST(max_min_gt AS DOUBLE)), 'max_min_gt must be a finite number, got ' || max_min_gt::VARCHAR)
       AS ok
), r AS (
    SELECT w.*,
           CASE WHEN NOT (isfinite(w.max) AND isfinite(w.min)) OR NOT w.n > 0 THEN NULL
                WHEN w.min >= range_start_inclusive AND w.max <= range_end_inclusive THEN 100.0
                WHEN w.max < range_start_inclusive OR w.min > range_end_inclusive THEN 0.0
                WHEN w.min BETWEEN range_start_inclusive AND range_end_inclusive
                  OR w.max BETWEEN range_start_inclusive AND range_end_inclusive THEN 100.0 / w.n
                ELSE 0.0 END AS pct_lo,
           CASE WHEN NOT (isfinite(w.max) AND isfinite(w.min)) OR NOT w.n > 0 THEN NULL
                WHEN w.min >= range_start_inclusive AND w.max <= range_end_inclusive THEN 100.0
                WHEN w.max < range_start_inclusive OR w.min > range_end_inclusive THEN 0.0
                ELSE 100.0 * (w.n - 1) / w.n END AS pct_hi
    FROM watch_stats w, p
    WHERE p.ok AND (target_type = 'tensor' OR w.target = target_type) AND NOT w.nonfinite
), h AS (
    SELECT r.*,
           coalesce(pct_hi < range_percentage_lt, false) AS c_plt,
           coalesce(pct_lo < range_percentage_lt, false) AS m_plt,
           coalesce(pct_lo > range_percentage_gt, false) AS c_pgt,
           coalesce(pct_hi > range_percentage_gt, false) AS m_pgt,
           coalesce(isfinite(r.max - r.min) AND r.max - r.min < max_min_lt, false) AS h_mm_lt,
           coalesce(isfinite(r.max - r.min) AND r.max - r.min > max_min_gt, false) AS h_mm_gt
    FROM r
)
SELECT run, rank, graph_id, iteration, exec_index, op_type, op_name, io, slot, row_id, source_file,
       source_line, target, stat_semantics, max, min, avg, l2norm, count, zero_count, nan_count,
       neg_inf_count, pos_inf_count, CAST(NULL AS BIGINT) AS prev_iteration, CAST(NULL AS BIGINT) AS prev_row_id,
       coalesce(condition_name, 'range') AS condition,
       c_plt OR c_pgt OR h_mm_lt OR h_mm_gt AS certain,
       concat_ws('; ',
                 CASE WHEN c_plt THEN printf('range percentage %g < range_percentage_lt %g', pct_hi, range_percentage_lt::DOUBLE)
                      WHEN m_plt THEN printf('range percentage in [%g, %g], range_percentage_lt %g: undecided from statistics',
                                             pct_lo, pct_hi, range_percentage_lt::DOUBLE) END,
                 CASE WHEN c_pgt THEN printf('range percentage %g > range_percentage_gt %g', pct_lo, range_percentage_gt::DOUBLE)
                      WHEN m_pgt THEN printf('range percentage in [%g, %g], range_percentage_gt %g: undecided from statistics',
                                             pct_lo, pct_hi, range_percentage_gt::DOUBLE) END,
                 CASE WHEN h_mm_lt THEN printf('max - min %g < max_min_lt %g', max - min, max_min_lt::DOUBLE) END,
                 CASE WHEN h_mm_gt THEN printf('max - min %g > max_min_gt %g', max - min, max_min_gt::DOUBLE) END) AS detail
FROM h
WHERE m_plt OR m_pgt OR h_mm_lt OR h_mm_gt
-- a bad parameter raises its error even when the optimizer has proved the result above empty
UNION ALL BY NAME SELECT CAST(NULL AS VARCHAR) AS run FROM p WHERE NOT p.ok;

-- watch_unchanged(target_type := 'tensor', rtol := 1e-5, atol := 1e-8, equal_nan := false,
--                 condition_name := NULL): tensors that may not have changed since the previous
-- iteration present (watch_pairs). MindInsight's definition is element-wise:
-- allclose(current, previous, rtol, atol): |c_i - p_i| <= atol + rtol |p_i| for every element. That
-- needs both tensors' data; from statistics this macro returns every pair allclose could hold for:
-- the element counts are equal and each statistic both rows have moved by no more than allclose
-- allows it to move, with M = max(|max|, |min|) of the previous tensor:
--   |max - prev_max|, |min - prev_min|, |avg - prev_avg| <= atol + rtol M
--   |l2norm - prev_l2norm|                                <= atol sqrt(n) + rtol prev_l2norm
-- (each is implied by element-wise allclose, so no unchanged tensor is missed). certain = TRUE only
-- when both rows have an md5 (statistic.csv MD5, or ingest --md5) and they are equal: the bytes are
-- identical. A tensor holding NaN on either side is never allclose with equal_nan = false and is not
-- returned; with equal_nan = true it is returned undecided unless the md5s are equal.
CREATE OR REPLACE MACRO watch_unchanged(target_type := 'tensor', rtol := 1e-5, atol := 1e-8, equal_nan := false,
                                        condition_name := NULL) AS TABLE
WITH p AS (
    SELECT watch_require(target_type IN ('tensor', 'weight', 'gradient', 'activation'),
                         'target_type must be tensor, weight, gradient or activation, got ' || coalesce(target_type::VARCHAR, 'NULL'))
       AND watch_require(rtol IS NOT NULL AND CAST(rtol AS DOUBLE) >= 0 AND isfinite(CAST(rtol AS DOUBLE)),
                         'rtol must be a finite number >= 0, got ' || coalesce(rtol::VARCHAR, 'NULL'))
       AND watch_require(atol IS NOT NULL AND CAST(atol AS DOUBLE) >= 0 AND isfinite(CAST(atol AS DOUBLE)),
                         'atol must be a finite number >= 0, got ' || coalesce(atol::VARCHAR, 'NULL'))
       AND watch_require(CAST(equal_nan AS BOOLEAN) IS NOT NULL, 'equal_nan must be true or false') AS ok
), q AS (
    SELECT w.*,
           w.md5 IS NOT NULL AND w.md5 = w.prev_md5 AS same_bytes,
           coalesce(w.has_nan, false) OR coalesce(w.prev_has_nan, false) AS any_nan,
           atol + rtol * w.prev_absmax AS tol
    FROM watch_pairs w, p
    WHERE p.ok AND (target_type = 'tensor' OR w.target = target_type)
      AND w.prev_iteration < w.iteration AND w.n = w.prev_n
), h AS (
    SELECT q.*,
           CASE WHEN any_nan THEN CAST(equal_nan AS BOOLEAN)
                ELSE coalesce(q.max = q.prev_max OR abs(q.max - q.prev_max) <= tol, true)
                 AND coalesce(q.min = q.prev_min OR abs(q.min - q.prev_min) <= tol, true)
                 AND coalesce(q.avg = q.prev_avg OR abs(q.avg - q.prev_avg) <= tol, true)
                 AND coalesce(q.l2norm = q.prev_l2norm
                              OR abs(q.l2norm - q.prev_l2norm) <= atol * sqrt(q.n) + rtol * q.prev_l2norm, true)
           END AS may_hold
    FROM q
)
SELECT run, rank, graph_id, iteration, exec_index, op_type, op_name, io, slot, row_id, source_file,
       source_line, target, stat_semantics, max, min, avg, l2norm, count, zero_count, nan_count,
       neg_inf_count, pos_inf_count, prev_iteration, prev_row_id,
       coalesce(condition_name, 'unchanged') AS condition,
       same_bytes AS certain,
       CASE WHEN same_bytes THEN printf('bytes identical to iteration %d (md5)', prev_iteration)
            ELSE printf('statistics within rtol %g, atol %g of iteration %d (max %g -> %g, min %g -> %g, mean %g -> %g, l2norm %g -> %g): element-wise allclose undecided from statistics',
                        rtol::DOUBLE, atol::DOUBLE, prev_iteration, prev_max, max, prev_min, min, prev_avg, avg, prev_l2norm, l2norm)
       END AS detail
FROM h
WHERE may_hold
-- a bad parameter raises its error even when the optimizer has proved the result above empty
UNION ALL BY NAME SELECT CAST(NULL AS VARCHAR) AS run FROM p WHERE NOT p.ok;

-- watch_change_ratio(target_type := 'tensor', abs_mean_update_ratio_gt := NULL,
--                    abs_mean_update_ratio_lt := NULL, epsilon := 1e-9, condition_name := NULL):
-- tensors whose update ratio R = mean|c - p| / (mean|p| + epsilon) against the previous iteration
-- present is > abs_mean_update_ratio_gt or < abs_mean_update_ratio_lt (MindInsight's definition). R
-- needs both tensors' elements; statistics bound it, with A = mean|c - p| and B = mean|p|:
--   A >= max(|avg - prev_avg|, |l2norm - prev_l2norm| / n, |max - prev_max| / n, |min - prev_min| / n)
--   A <= min((l2norm + prev_l2norm) / sqrt(n), max(max - prev_min, prev_max - min)); A = 0 when md5s match
--   B within the abs_mean bounds of the previous row (header)
-- so R_lo = A_lo / (B_hi + epsilon) <= R <= A_hi / (B_lo + epsilon) = R_hi. A row is certain when
-- the whole interval passes the threshold, returned undecided (certain = FALSE) when part of it does,
-- and left out when none does. Pairs with different element counts, or where either side holds
-- NaN/Inf, are not evaluated.
CREATE OR REPLACE MACRO watch_change_ratio(target_type := 'tensor', abs_mean_update_ratio_gt := NULL,
                                           abs_mean_update_ratio_lt := NULL, epsilon := 1e-9,
                                           condition_name := NULL) AS TABLE
WITH p AS (
    SELECT watch_require(target_type IN ('tensor', 'weight', 'gradient', 'activation'),
                         'target_type must be tensor, weight, gradient or activation, got ' || coalesce(target_type::VARCHAR, 'NULL'))
       AND watch_require(coalesce(abs_mean_update_ratio_gt, abs_mean_update_ratio_lt) IS NOT NULL,
                         coalesce(condition_name, 'watch_change_ratio')
                         || ': give abs_mean_update_ratio_gt or abs_mean_update_ratio_lt')
       AND watch_require(abs_mean_update_ratio_gt IS NULL OR (CAST(abs_mean_update_ratio_gt AS DOUBLE) >= 0
                                                              AND isfinite(CAST(abs_mean_update_ratio_gt AS DOUBLE))),
                         'abs_mean_update_ratio_gt must be a finite number >= 0, got ' || abs_mean_update_ratio_gt::VARCHAR)
       AND watch_require(abs_mean_update_ratio_lt IS NULL OR (CAST(abs_mean_update_ratio_lt AS DOUBLE) >= 0
                                                              AND isfinite(CAST(abs_mean_update_ratio_lt AS DOUBLE))),
                         'abs_mean_update_ratio_lt must be a finite number >= 0, got ' || abs_mean_update_ratio_lt::VARCHAR)
       AND watch_require(epsilon IS NOT NULL AND CAST(epsilon AS DOUBLE) >= 0 AND isfinite(CAST(epsilon AS DOUBLE)),
                         'epsilon must be a finite number >= 0, got ' || coalesce(epsilon::VARCHAR, 'NULL')) AS ok
), q AS (
    SELECT w.*,
           w.md5 IS NOT NULL AND w.md5 = w.prev_md5 AS same_bytes
    FROM watch_pairs w, p
    WHERE p.ok AND (target_type = 'tensor' OR w.target = target_type)
      AND w.prev_iteration < w.iteration AND w.n = w.prev_n AND w.n > 0
      AND NOT w.nonfinite AND NOT coalesce(w.prev_nonfinite, true)
), a AS (
    SELECT q.*,
           CASE WHEN same_bytes THEN 0.0
                ELSE coalesce(greatest(abs(q.avg - q.prev_avg), abs(q.l2norm - q.prev_l2norm) / q.n,
                                       abs(q.max - q.prev_max) / q.n, abs(q.min - q.prev_min) / q.n), 0.0) END AS a_lo,
           CASE WHEN same_bytes THEN 0.0
                ELSE coalesce(least((q.l2norm + q.prev_l2norm) / sqrt(q.n),
                                    greatest(q.max - q.prev_min, q.prev_max - q.min)), 'inf'::DOUBLE) END AS a_hi
    FROM q
), r AS (
    SELECT a.*,
           coalesce(a_lo / (a.prev_abs_mean_hi + epsilon), 0.0) AS r_lo,
           CASE WHEN a_hi = 0 THEN 0.0 ELSE coalesce(a_hi / (a.prev_abs_mean_lo + epsilon), 'inf'::DOUBLE) END AS r_hi
    FROM a
), h AS (
    SELECT r.*,
           coalesce(r_lo > abs_mean_update_ratio_gt, false) AS c_gt,
           coalesce(r_hi > abs_mean_update_ratio_gt, false) AS m_gt,
           coalesce(r_hi < abs_mean_update_ratio_lt, false) AS c_lt,
           coalesce(r_lo < abs_mean_update_ratio_lt, false) AS m_lt
    FROM r
)
SELECT run, rank, graph_id, iteration, exec_index, op_type, op_name, io, slot, row_id, source_file,
       source_line, target, stat_semantics, max, min, avg, l2norm, count, zero_count, nan_count,
       neg_inf_count, pos_inf_count, prev_iteration, prev_row_id,
       coalesce(condition_name, 'change_ratio') AS condition,
       c_gt OR c_lt AS certain,
       concat_ws('; ',
                 CASE WHEN c_gt THEN printf('update ratio >= %g > abs_mean_update_ratio_gt %g (against iteration %d)',
                                            r_lo, abs_mean_update_ratio_gt::DOUBLE, prev_iteration)
                      WHEN m_gt THEN printf('update ratio in [%g, %g], abs_mean_update_ratio_gt %g (against iteration %d): undecided from statistics',
                                            r_lo, r_hi, abs_mean_update_ratio_gt::DOUBLE, prev_iteration) END,
                 CASE WHEN c_lt THEN printf('update ratio <= %g < abs_mean_update_ratio_lt %g (against iteration %d)',
                                            r_hi, abs_mean_update_ratio_lt::DOUBLE, prev_iteration)
                      WHEN m_lt THEN printf('update ratio in [%g, %g], abs_mean_update_ratio_lt %g (against iteration %d): undecided from statistics',
                                            r_lo, r_hi, abs_mean_update_ratio_lt::DOUBLE, prev_iteration) END) AS detail
FROM h
WHERE m_gt OR m_lt
-- a bad parameter raises its error even when the optimizer has proved the result above empty
UNION ALL BY NAME SELECT CAST(NULL AS VARCHAR) AS run FROM p WHERE NOT p.ok;

-- ---- MindInsight's conditions (condition_list.py), one macro each ------------------------------

-- nan / inf (ConditionIdEnum NAN, INF): tensors holding NaN and/or +-Inf. Exact (see watch_nonfinite).
CREATE OR REPLACE MACRO watch_nan_inf(nan := true, inf := true) AS TABLE
SELECT * FROM watch_nonfinite(target_type := 'tensor', nan := nan, inf := inf, condition_name := 'nan_inf');

-- TO tensor_overflow: any tensor holding NaN or +-Inf. Exact.
CREATE OR REPLACE MACRO watch_tensor_overflow() AS TABLE
SELECT * FROM watch_nonfinite(target_type := 'tensor', condition_name := 'tensor_overflow');

-- WO weight_overflow: weights holding NaN or +-Inf. Exact.
CREATE OR REPLACE MACRO watch_weight_overflow() AS TABLE
SELECT * FROM watch_nonfinite(target_type := 'weight', condition_name := 'weight_overflow');

-- GE gradient_exploding: gradients holding NaN or +-Inf (MindInsight: no parameters); l2norm_gt
-- (dumpcat's addition, default NULL: not checked) also flags gradients whose l2norm exceeds it. Exact.
CREATE OR REPLACE MACRO watch_gradient_exploding(l2norm_gt := NULL) AS TABLE
SELECT * FROM watch_nonfinite(target_type := 'gradient', l2norm_gt := l2norm_gt, condition_name := 'gradient_exploding');

-- OO operator_overflow: Ascend overflow-debug records (`overflows`, op_debug_mode 3) that report an
-- overflow (status <> 0) or name the operator that overflowed; one row per info block. Exact as far
-- as the records go; io, slot and the statistics are NULL, row_id is the operator's first tensor
-- (all of them in detail). Other platforms write no such records.
CREATE OR REPLACE MACRO watch_operator_overflow() AS TABLE
SELECT o.run, o.rank, o.graph_id, o.iteration, o.exec_index, o.op_type, o.op_name,
       CAST(NULL AS VARCHAR) AS io, CAST(NULL AS INTEGER) AS slot, o.row_ids[1] AS row_id, o.source_file,
       o.source_line, 'tensor' AS target, CAST(NULL AS VARCHAR) AS stat_semantics,
       CAST(NULL AS DOUBLE) AS max, CAST(NULL AS DOUBLE) AS min, CAST(NULL AS DOUBLE) AS avg,
       CAST(NULL AS DOUBLE) AS l2norm, CAST(NULL AS BIGINT) AS count, CAST(NULL AS BIGINT) AS zero_count,
       CAST(NULL AS BIGINT) AS nan_count, CAST(NULL AS BIGINT) AS neg_inf_count,
       CAST(NULL AS BIGINT) AS pos_inf_count, CAST(NULL AS BIGINT) AS prev_iteration,
       CAST(NULL AS BIGINT) AS prev_row_id, 'operator_overflow' AS condition, true AS certain,
       printf('%s block, status 0x%x, task %d, stream %d%s', o.block, o.status, o.task_id, o.stream_id,
              CASE WHEN o.op_name IS NULL THEN ', no operator identified'
                   ELSE ', tensors ' || CAST(o.row_ids AS VARCHAR) END) AS detail
FROM overflows o
WHERE o.status <> 0 OR o.op_name IS NOT NULL;

-- TL tensor_too_large / WL weight_too_large / GL gradient_too_large: abs_mean_gt, max_gt, min_gt,
-- mean_gt (MindInsight), l2norm_gt (dumpcat's addition); all default NULL, give at least one; any
-- fires. Exact except abs_mean_gt (see watch_values).
CREATE OR REPLACE MACRO watch_tensor_too_large(abs_mean_gt := NULL, max_gt := NULL, min_gt := NULL, mean_gt := NULL,
                                               l2norm_gt := NULL) AS TABLE
SELECT * FROM watch_values(target_type := 'tensor', abs_mean_gt := abs_mean_gt, max_gt := max_gt, min_gt := min_gt,
                           mean_gt := mean_gt, l2norm_gt := l2norm_gt, condition_name := 'tensor_too_large');

CREATE OR REPLACE MACRO watch_weight_too_large(abs_mean_gt := NULL, max_gt := NULL, min_gt := NULL, mean_gt := NULL,
                                               l2norm_gt := NULL) AS TABLE
SELECT * FROM watch_values(target_type := 'weight', abs_mean_gt := abs_mean_gt, max_gt := max_gt, min_gt := min_gt,
                           mean_gt := mean_gt, l2norm_gt := l2norm_gt, condition_name := 'weight_too_large');

CREATE OR REPLACE MACRO watch_gradient_too_large(abs_mean_gt := NULL, max_gt := NULL, min_gt := NULL,
                                                 mean_gt := NULL, l2norm_gt := NULL) AS TABLE
SELECT * FROM watch_values(target_type := 'gradient', abs_mean_gt := abs_mean_gt, max_gt := max_gt, min_gt := min_gt,
                           mean_gt := mean_gt, l2norm_gt := l2norm_gt, condition_name := 'gradient_too_large');

-- TS tensor_too_small / WS weight_too_small / GV gradient_vanishing: abs_mean_lt, max_lt, min_lt,
-- mean_lt (MindInsight), l2norm_lt (dumpcat's addition: a vanishing gradient by its L2 norm); all
-- default NULL, give at least one; any fires. Exact except abs_mean_lt (see watch_values).
CREATE OR REPLACE MACRO watch_tensor_too_small(abs_mean_lt := NULL, max_lt := NULL, min_lt := NULL, mean_lt := NULL,
                                               l2norm_lt := NULL) AS TABLE
SELECT * FROM watch_values(target_type := 'tensor', abs_mean_lt := abs_mean_lt, max_lt := max_lt, min_lt := min_lt,
                           mean_lt := mean_lt, l2norm_lt := l2norm_lt, condition_name := 'tensor_too_small');

CREATE OR REPLACE MACRO watch_weight_too_small(abs_mean_lt := NULL, max_lt := NULL, min_lt := NULL, mean_lt := NULL,
                                               l2norm_lt := NULL) AS TABLE
SELECT * FROM watch_values(target_type := 'weight', abs_mean_lt := abs_mean_lt, max_lt := max_lt, min_lt := min_lt,
                           mean_lt := mean_lt, l2norm_lt := l2norm_lt, condition_name := 'weight_too_small');

CREATE OR REPLACE MACRO watch_gradient_vanishing(abs_mean_lt := NULL, max_lt := NULL, min_lt := NULL,
                                                 mean_lt := NULL, l2norm_lt := NULL) AS TABLE
SELECT * FROM watch_values(target_type := 'gradient', abs_mean_lt := abs_mean_lt, max_lt := max_lt, min_lt := min_lt,
                           mean_lt := mean_lt, l2norm_lt := l2norm_lt, condition_name := 'gradient_vanishing');

-- TZ tensor_all_zero: zero_percentage_ge (default 100). Exact with zero_count (see watch_zero).
CREATE OR REPLACE MACRO watch_tensor_all_zero(zero_percentage_ge := 100) AS TABLE
SELECT * FROM watch_zero(target_type := 'tensor', zero_percentage_ge := zero_percentage_ge,
                         condition_name := 'tensor_all_zero');

-- TI tensor_initialization / WI weight_initialization: at each tensor's first dumped iteration,
-- zero_percentage_ge (default 100), max_gt, min_lt (default NULL); any fires. Exact with zero_count.
CREATE OR REPLACE MACRO watch_tensor_initialization(zero_percentage_ge := 100, max_gt := NULL, min_lt := NULL) AS TABLE
SELECT * FROM watch_zero(target_type := 'tensor', zero_percentage_ge := zero_percentage_ge, max_gt := max_gt,
                         min_lt := min_lt, first_iteration_only := true, condition_name := 'tensor_initialization');

CREATE OR REPLACE MACRO watch_weight_initialization(zero_percentage_ge := 100, max_gt := NULL, min_lt := NULL) AS TABLE
SELECT * FROM watch_zero(target_type := 'weight', zero_percentage_ge := zero_percentage_ge, max_gt := max_gt,
                         min_lt := min_lt, first_iteration_only := true, condition_name := 'weight_initialization');

-- WNC weight_not_changed (and the offline API's TensorUnchanged for any tensor): rtol (1e-5), atol
-- (1e-8), equal_nan (false). Element-wise allclose is screened by statistics: see watch_unchanged.
CREATE OR REPLACE MACRO watch_weight_not_changed(rtol := 1e-5, atol := 1e-8, equal_nan := false) AS TABLE
SELECT * FROM watch_unchanged(target_type := 'weight', rtol := rtol, atol := atol, equal_nan := equal_nan,
                              condition_name := 'weight_not_changed');

CREATE OR REPLACE MACRO watch_tensor_unchanged(rtol := 1e-5, atol := 1e-8, equal_nan := false) AS TABLE
SELECT * FROM watch_unchanged(target_type := 'tensor', rtol := rtol, atol := atol, equal_nan := equal_nan,
                              condition_name := 'tensor_unchanged');

-- WCL weight_change_too_large (abs_mean_update_ratio_gt 0.1, epsilon 1e-9) and WCS
-- weight_change_too_small (abs_mean_update_ratio_lt 1e-4, epsilon 1e-9); the offline API's
-- TensorChangeAboveThreshold / BelowThreshold for any tensor. Bounded by statistics: see
-- watch_change_ratio.
CREATE OR REPLACE MACRO watch_weight_change_too_large(abs_mean_update_ratio_gt := 0.1, epsilon := 1e-9) AS TABLE
SELECT * FROM watch_change_ratio(target_type := 'weight', abs_mean_update_ratio_gt := abs_mean_update_ratio_gt,
                                 epsilon := epsilon, condition_name := 'weight_change_too_large');

CREATE OR REPLACE MACRO watch_weight_change_too_small(abs_mean_update_ratio_lt := 1e-4, epsilon := 1e-9) AS TABLE
SELECT * FROM watch_change_ratio(target_type := 'weight', abs_mean_update_ratio_lt := abs_mean_update_ratio_lt,
                                 epsilon := epsilon, condition_name := 'weight_change_too_small');

CREATE OR REPLACE MACRO watch_tensor_change_too_large(abs_mean_update_ratio_gt := 0.1, epsilon := 1e-9) AS TABLE
SELECT * FROM watch_change_ratio(target_type := 'tensor', abs_mean_update_ratio_gt := abs_mean_update_ratio_gt,
                                 epsilon := epsilon, condition_name := 'tensor_change_too_large');

CREATE OR REPLACE MACRO watch_tensor_change_too_small(abs_mean_update_ratio_lt := 1e-4, epsilon := 1e-9) AS TABLE
SELECT * FROM watch_change_ratio(target_type := 'tensor', abs_mean_update_ratio_lt := abs_mean_update_ratio_lt,
                                 epsilon := epsilon, condition_name := 'tensor_change_too_small');

-- TR tensor_range / AR activation_range: range_start_inclusive, range_end_inclusive,
-- range_percentage_lt, range_percentage_gt, max_min_lt, max_min_gt (all default NULL; give one of the
-- last four; a percentage needs both range ends). max - min exact; the range percentage bounded by
-- statistics (see watch_range).
CREATE OR REPLACE MACRO watch_tensor_range(range_start_inclusive := NULL, range_end_inclusive := NULL,
                                           range_percentage_lt := NULL, range_percentage_gt := NULL,
                                           max_min_lt := NULL, max_min_gt := NULL) AS TABLE
SELECT * FROM watch_range(target_type := 'tensor', range_start_inclusive := range_start_inclusive,
                          range_end_inclusive := range_end_inclusive, range_percentage_lt := range_percentage_lt,
                          range_percentage_gt := range_percentage_gt, max_min_lt := max_min_lt,
                          max_min_gt := max_min_gt, condition_name := 'tensor_range');

CREATE OR REPLACE MACRO watch_activation_range(range_start_inclusive := NULL, range_end_inclusive := NULL,
                                               range_percentage_lt := NULL, range_percentage_gt := NULL,
                                               max_min_lt := NULL, max_min_gt := NULL) AS TABLE
SELECT * FROM watch_range(target_type := 'activation', range_start_inclusive := range_start_inclusive,
                          range_end_inclusive := range_end_inclusive, range_percentage_lt := range_percentage_lt,
                          range_percentage_gt := range_percentage_gt, max_min_lt := max_min_lt,
                          max_min_gt := max_min_gt, condition_name := 'activation_range');

-- watch_conditions: every watch macro, its parameters with defaults, what it flags, whether its
-- result is exact, and the MindInsight condition it stands for (`SELECT * FROM watch_conditions`).
CREATE OR REPLACE VIEW watch_conditions AS
SELECT * FROM (VALUES
    ('watch_nan_inf', 'nan := true, inf := true', 'nan, inf',
     'tensors holding NaN and/or +-Inf', 'exact'),
    ('watch_tensor_overflow', '', 'tensor_overflow (TO)',
     'any tensor holding NaN or +-Inf', 'exact'),
    ('watch_weight_overflow', '', 'weight_overflow (WO)',
     'weights holding NaN or +-Inf', 'exact'),
    ('watch_gradient_exploding', 'l2norm_gt := NULL', 'gradient_exploding (GE)',
     'gradients holding NaN or +-Inf, or (l2norm_gt) with a larger L2 norm', 'exact'),
    ('watch_operator_overflow', '', 'operator_overflow (OO)',
     'Ascend overflow-debug records reporting an overflow, with the operator', 'exact'),
    ('watch_tensor_too_large', 'abs_mean_gt, max_gt, min_gt, mean_gt, l2norm_gt := NULL', 'tensor_too_large (TL)',
     'any tensor with a statistic above a threshold', 'exact; abs_mean_gt bounded (certain = false rows need the data)'),
    ('watch_weight_too_large', 'abs_mean_gt, max_gt, min_gt, mean_gt, l2norm_gt := NULL', 'weight_too_large (WL)',
     'weights with a statistic above a threshold', 'exact; abs_mean_gt bounded (certain = false rows need the data)'),
    ('watch_gradient_too_large', 'abs_mean_gt, max_gt, min_gt, mean_gt, l2norm_gt := NULL', 'gradient_too_large (GL)',
     'gradients with a statistic above a threshold', 'exact; abs_mean_gt bounded (certain = false rows need the data)'),
    ('watch_tensor_too_small', 'abs_mean_lt, max_lt, min_lt, mean_lt, l2norm_lt := NULL', 'tensor_too_small (TS)',
     'any tensor with a statistic below a threshold', 'exact; abs_mean_lt bounded (certain = false rows need the data)'),
    ('watch_weight_too_small', 'abs_mean_lt, max_lt, min_lt, mean_lt, l2norm_lt := NULL', 'weight_too_small (WS)',
     'weights with a statistic below a threshold', 'exact; abs_mean_lt bounded (certain = false rows need the data)'),
    ('watch_gradient_vanishing', 'abs_mean_lt, max_lt, min_lt, mean_lt, l2norm_lt := NULL', 'gradient_vanishing (GV)',
     'gradients with a statistic below a threshold', 'exact; abs_mean_lt bounded (certain = false rows need the data)'),
    ('watch_tensor_all_zero', 'zero_percentage_ge := 100', 'tensor_all_zero (TZ)',
     'tensors whose share of zero elements is at least the percentage', 'exact with zero_count; else bounded by max/min'),
    ('watch_tensor_initialization', 'zero_percentage_ge := 100, max_gt := NULL, min_lt := NULL', 'tensor_initialization (TI)',
     'at each tensor''s first dumped iteration: mostly zeros, max above or min below a threshold', 'exact with zero_count; else bounded by max/min'),
    ('watch_weight_initialization', 'zero_percentage_ge := 100, max_gt := NULL, min_lt := NULL', 'weight_initialization (WI)',
     'at each weight''s first dumped iteration: mostly zeros, max above or min below a threshold', 'exact with zero_count; else bounded by max/min'),
    ('watch_weight_not_changed', 'rtol := 1e-5, atol := 1e-8, equal_nan := false', 'weight_not_changed (WNC)',
     'weights that may be allclose to their previous iteration', 'screen: never misses; certain only for identical bytes (md5)'),
    ('watch_tensor_unchanged', 'rtol := 1e-5, atol := 1e-8, equal_nan := false', 'TensorUnchanged (offline API)',
     'tensors that may be allclose to their previous iteration', 'screen: never misses; certain only for identical bytes (md5)'),
    ('watch_weight_change_too_large', 'abs_mean_update_ratio_gt := 0.1, epsilon := 1e-9', 'weight_change_too_large (WCL)',
     'weights whose mean |update| / mean |previous| is above the ratio', 'bounded: certain or undecided rows, never misses'),
    ('watch_weight_change_too_small', 'abs_mean_update_ratio_lt := 1e-4, epsilon := 1e-9', 'weight_change_too_small (WCS)',
     'weights whose mean |update| / mean |previous| is below the ratio', 'bounded: certain or undecided rows, never misses'),
    ('watch_tensor_change_too_large', 'abs_mean_update_ratio_gt := 0.1, epsilon := 1e-9', 'TensorChangeAboveThreshold (offline API)',
     'tensors whose mean |update| / mean |previous| is above the ratio', 'bounded: certain or undecided rows, never misses'),
    ('watch_tensor_change_too_small', 'abs_mean_update_ratio_lt := 1e-4, epsilon := 1e-9', 'TensorChangeBelowThreshold (offline API)',
     'tensors whose mean |update| / mean |previous| is below the ratio', 'bounded: certain or undecided rows, never misses'),
    ('watch_tensor_range', 'range_start_inclusive, range_end_inclusive, range_percentage_lt, range_percentage_gt, max_min_lt, max_min_gt := NULL',
     'tensor_range (TR)', 'tensors with too few / too many elements in a range, or max - min out of bounds',
     'max - min exact; range percentage bounded (certain = false rows need the data)'),
    ('watch_activation_range', 'range_start_inclusive, range_end_inclusive, range_percentage_lt, range_percentage_gt, max_min_lt, max_min_gt := NULL',
     'activation_range (AR)', 'outputs of ReLU/Sigmoid/Tanh with too few / too many elements in a range, or max - min out of bounds',
     'max - min exact; range percentage bounded (certain = false rows need the data)'),
    ('watch_nonfinite', 'target_type := ''tensor'', nan := true, inf := true, l2norm_gt := NULL, condition_name := NULL', 'generic',
     'the overflow conditions for any target', 'exact'),
    ('watch_values', 'target_type := ''tensor'', abs_mean_gt, max_gt, min_gt, mean_gt, l2norm_gt, abs_mean_lt, max_lt, min_lt, mean_lt, l2norm_lt := NULL, condition_name := NULL',
     'generic', 'too large / too small for any target', 'exact; abs_mean bounded'),
    ('watch_zero', 'target_type := ''tensor'', zero_percentage_ge := 100, max_gt := NULL, min_lt := NULL, first_iteration_only := false, condition_name := NULL',
     'generic', 'all zero / initialization for any target', 'exact with zero_count'),
    ('watch_range', 'target_type := ''tensor'', range_start_inclusive, range_end_inclusive, range_percentage_lt, range_percentage_gt, max_min_lt, max_min_gt := NULL, condition_name := NULL',
     'generic', 'range for any target', 'max - min exact; percentage bounded'),
    ('watch_unchanged', 'target_type := ''tensor'', rtol := 1e-5, atol := 1e-8, equal_nan := false, condition_name := NULL',
     'generic', 'unchanged for any target', 'screen; certain for identical bytes'),
    ('watch_change_ratio', 'target_type := ''tensor'', abs_mean_update_ratio_gt := NULL, abs_mean_update_ratio_lt := NULL, epsilon := 1e-9, condition_name := NULL',
     'generic', 'change too large / too small for any target', 'bounded')
) AS t(macro, parameters, mindinsight_condition, meaning, exactness);
