-- `dumpcat report`: the first anomaly of every step of $run (first_anomaly: one row per rank and
-- iteration). The report keeps it as the temporary table `report_first`; it has one row per
-- anomalous step, so it stays small whatever the number of tensors.
SELECT rank, iteration, graph_id, exec_index, timestamp_us, op_type, op_name, io, slot,
       nan_count, neg_inf_count, pos_inf_count, source_file, source_line, source_code,
       anomalous_outputs, anomalous_graphs, row_id
FROM first_anomaly
WHERE run = $run;
