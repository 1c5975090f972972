-- Where things went wrong first.
--
-- A tensor "holds NaN or Inf" by its counts when the statistic has them, and otherwise by what its
-- producer's definitions allow (stats.has_nan / has_inf, see 40_stats.sql): the default v2.3+
-- statistic.csv has only max, min and l2norm, and any NaN makes max NaN; CANN's max skips NaN.
--
-- Order within a step (one run, rank and iteration). Control flow splits a step into many kernel
-- graphs, a loop body runs several times, and graph ids follow compilation, not execution. So:
--   * the iteration (the dump directory, which the global execution history records per graph
--     execution) decides the step a tensor belongs to; a timestamp never moves a tensor to
--     another step;
--   * within the step, the file timestamp (µs, written as each kernel finished) orders kernels
--     across graphs and across repeated executions;
--   * equal timestamps fall back to graph id, execution index, then slot.
-- Outputs come before inputs: the first anomalous *output* is the answer, and an input is one only
-- when the step dumped no anomalous output at all (e.g. `input_output: 1`).

-- anomalous_tensors: every statistic row whose tensor holds NaN or ±Inf.
CREATE OR REPLACE VIEW anomalous_tensors AS
SELECT *
FROM stats
WHERE has_nan OR has_inf;

-- The operators feeding each operator (data edges of the graph IR), for the answer's input_ops.
CREATE OR REPLACE VIEW op_feeders AS
SELECT run, rank, graph_id, consumer AS op_name, list(producer ORDER BY input_index) AS input_ops
FROM edges
WHERE kind = 'data'
GROUP BY run, rank, graph_id, consumer;

-- first_anomaly: one row per run, rank and iteration (a step): the first anomalous output in the
-- order the step executed, across all its kernel graphs, with its source line and the operators
-- feeding it; `anomalous_outputs` and `anomalous_graphs` say how much of the step it went on to spoil.
CREATE OR REPLACE VIEW first_anomaly AS
WITH firsts AS (
    SELECT DISTINCT ON (run, rank, iteration) *
    FROM anomalous_tensors
    ORDER BY run, rank, iteration, io <> 'output', timestamp_us NULLS LAST, graph_id,
             exec_index NULLS LAST, slot
),
spread AS (
    SELECT run, rank, iteration,
           count(*) FILTER (WHERE io = 'output') AS anomalous_outputs,
           count(DISTINCT graph_id) AS anomalous_graphs
    FROM anomalous_tensors
    GROUP BY run, rank, iteration
)
SELECT f.run, f.rank, f.iteration, f.graph_id, f.exec_index, f.timestamp_us, f.op_type, f.op_name,
       f.io, f.slot, f.nan_count, f.neg_inf_count, f.pos_inf_count, f.max, f.min, f.count,
       f.source_file, f.source_line, f.source_code,
       fd.input_ops, s.anomalous_outputs, s.anomalous_graphs, f.name_match, f.row_id,
       -- what the tensor's file contradicts (stats.mismatch): 'dtype' when its bytes are not of the
       -- dtype its name says, e.g. a float32 kernel's buffer dumped as float16 (read as float32)
       f.mismatch
FROM firsts f
JOIN spread s
  ON s.run = f.run AND s.rank = f.rank AND s.iteration IS NOT DISTINCT FROM f.iteration
LEFT JOIN op_feeders fd
       ON fd.run = f.run AND fd.rank = f.rank AND fd.graph_id = f.graph_id AND fd.op_name = f.op_name;

-- first_anomaly_by_graph: the same question asked of each kernel graph on its own (one row per run,
-- rank, graph and iteration), in the graph's execution order; kernels the execution order does not
-- list (parameters, graphs resolved from the IR) follow by timestamp. With control flow most of
-- these rows are downstream effects of the step's first anomaly.
CREATE OR REPLACE VIEW first_anomaly_by_graph AS
WITH firsts AS (
    SELECT DISTINCT ON (run, rank, graph_id, iteration) *
    FROM anomalous_tensors
    ORDER BY run, rank, graph_id, iteration, io <> 'output', exec_index NULLS LAST,
             timestamp_us NULLS LAST, slot
)
SELECT f.run, f.rank, f.graph_id, f.iteration, f.exec_index, f.timestamp_us, f.op_type, f.op_name,
       f.io, f.slot, f.nan_count, f.neg_inf_count, f.pos_inf_count, f.max, f.min, f.count,
       f.source_file, f.source_line, f.source_code, fd.input_ops, f.name_match, f.row_id
FROM firsts f
LEFT JOIN op_feeders fd
       ON fd.run = f.run AND fd.rank = f.rank AND fd.graph_id = f.graph_id AND fd.op_name = f.op_name;
