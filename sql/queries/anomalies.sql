-- The first anomaly of every step (run, rank, iteration), for `dumpcat anomalies`.
SELECT run, rank, iteration, graph_id, exec_index, op_name, io, slot,
       nan_count, neg_inf_count, pos_inf_count,
       source_file || ':' || source_line AS source, source_code, input_ops,
       anomalous_outputs, anomalous_graphs, row_id
FROM first_anomaly
WHERE ($run IS NULL OR run = $run)
ORDER BY run, rank, iteration;
