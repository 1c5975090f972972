-- ops: every kernel of every graph in execution order (execution_order/ms_execution_order_graph_*.csv).
CREATE OR REPLACE VIEW ops AS
SELECT run, rank, graph_id, exec_index, op_type,
       full_name AS op_name, short_name, sanitized_name
FROM raw_ops;

-- graph_runs: the global execution history, one row per execution of a (root) graph.
CREATE OR REPLACE VIEW graph_runs AS
SELECT run, rank, graph_id, seq, iteration
FROM raw_graph_runs;
