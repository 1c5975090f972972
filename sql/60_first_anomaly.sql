-- first_anomaly: per run, rank, graph and iteration, the first operator in execution order whose
-- output holds NaN or Inf, with its source line, its counts and the operators feeding it.
--
-- "Holds NaN or Inf" uses the counts when the statistic has them, and max/min otherwise (the
-- default v2.3+ statistic.csv has only max, min and l2norm; any NaN makes max NaN).
CREATE OR REPLACE VIEW first_anomaly AS
WITH bad AS (
    SELECT *
    FROM stats
    WHERE io = 'output' AND exec_index IS NOT NULL
      AND (coalesce(nan_count, 0) > 0 OR coalesce(neg_inf_count, 0) > 0 OR coalesce(pos_inf_count, 0) > 0
           OR NOT isfinite(max) OR NOT isfinite(min))
),
firsts AS (
    SELECT DISTINCT ON (run, rank, graph_id, iteration) *
    FROM bad
    ORDER BY run, rank, graph_id, iteration, exec_index, slot
),
feeders AS (
    SELECT run, rank, graph_id, consumer AS op_name,
           list(producer ORDER BY input_index) AS input_ops
    FROM edges
    WHERE kind = 'data'
    GROUP BY run, rank, graph_id, consumer
)
SELECT f.run, f.rank, f.graph_id, f.iteration, f.exec_index, f.op_type, f.op_name, f.slot,
       f.nan_count, f.neg_inf_count, f.pos_inf_count, f.max, f.min, f.count,
       f.source_file, f.source_line, f.source_code,
       fd.input_ops, f.row_id
FROM firsts f
LEFT JOIN feeders fd
       ON fd.run = f.run AND fd.rank = f.rank AND fd.graph_id = f.graph_id AND fd.op_name = f.op_name;
