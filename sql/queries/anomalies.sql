-- The first anomaly of every run, rank, graph and iteration, for `dumpcat anomalies`.
SELECT run, rank, graph_id, iteration, exec_index, op_name, slot,
       nan_count, neg_inf_count, pos_inf_count,
       source_file || ':' || source_line AS source, source_code, input_ops, row_id
FROM first_anomaly
WHERE ($run IS NULL OR run = $run)
ORDER BY run, rank, graph_id, iteration;
