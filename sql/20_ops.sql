-- ops: every kernel of every graph in execution order (execution_order/ms_execution_order_graph_*.csv),
-- with the user source line that created it (from the graph IR).
CREATE OR REPLACE VIEW ops AS
SELECT o.run, o.rank, o.graph_id, o.exec_index, o.op_type,
       o.full_name AS op_name, o.short_name, o.sanitized_name,
       s.source_file, s.source_line, s.source_code
FROM raw_ops o
LEFT JOIN op_source s
       ON s.run = o.run AND s.rank = o.rank AND s.graph_id = o.graph_id AND s.full_name = o.full_name;

-- graph_runs: the global execution history, one row per execution of a (root) graph.
CREATE OR REPLACE VIEW graph_runs AS
SELECT run, rank, graph_id, seq, iteration
FROM raw_graph_runs;
