-- The first anomaly of every step (run, rank, iteration), for `dumpcat anomalies`: what a person
-- reads first. `first_anomaly` has more (exec_index, input_ops, max/min, anomalous_graphs, ...).
SELECT run, rank, iteration, graph_id, op_name, io, slot,
       nan_count, neg_inf_count, pos_inf_count,
       source_file || ':' || source_line AS source, source_code, anomalous_outputs, row_id
FROM first_anomaly
WHERE ($run IS NULL OR run = $run)
ORDER BY run, rank, iteration;
