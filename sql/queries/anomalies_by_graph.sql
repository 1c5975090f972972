-- The first anomaly of every kernel graph of every step, for `dumpcat anomalies --by-graph`: the
-- steps in order, their graphs in the order they ran.
SELECT run, rank, iteration, graph_id, exec_index, op_name, io, slot,
       nan_count, neg_inf_count, pos_inf_count,
       source_file || ':' || source_line AS source, source_code, row_id
FROM first_anomaly_by_graph
WHERE ($run IS NULL OR run = $run)
ORDER BY run, rank, iteration, timestamp_us NULLS LAST, graph_id;
