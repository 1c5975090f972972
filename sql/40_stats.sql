-- stats: one row per tensor statistic.
--
-- Rows come from statistic.csv where the dump wrote one (stat_source = 'statistic.csv') and are
-- computed by dumpcat from the tensor data otherwise (stat_source = 'computed'; CPU dumps cannot
-- write statistic.csv). A tensor with a statistic.csv row never also shows a computed row.
--
-- The name-resolution joins below are the same as in 30_tensors.sql on purpose: joining `stats`
-- to the `tensors` view instead would cost a join over every tensor on each query, where these
-- joins only touch the (small) operator tables after the WHERE clause has filtered the rows.
CREATE OR REPLACE VIEW stats AS
WITH unioned AS (
    SELECT row_id, stat_id, run, rank, net, graph_id, iteration, op_type, file_op_name, file_op_base,
           timestamp_us, io, slot, data_type AS dtype, shape, data_size AS nbytes,
           max, min, avg, count, neg_count, pos_count, nan_count, neg_inf_count, pos_inf_count,
           zero_count, l2norm, md5, 'statistic.csv' AS stat_source, mismatch,
           CAST(NULL AS VARCHAR) AS op_full_name
    FROM raw_stat_rows
    UNION ALL
    SELECT row_id, NULL AS stat_id, run, rank, net, graph_id, iteration, op_type, file_op_name, file_op_base,
           timestamp_us, io, slot, dtype, shape, nbytes,
           max, min, avg, count, neg_count, pos_count, nan_count, neg_inf_count, pos_inf_count,
           zero_count, l2norm, md5, 'computed' AS stat_source, CAST(NULL AS VARCHAR) AS mismatch,
           op_full_name
    FROM raw_tensor_stats c
    WHERE NOT EXISTS (SELECT 1 FROM raw_stat_rows s WHERE s.row_id = c.row_id)
)
SELECT u.row_id, u.stat_id, u.run, u.rank, u.net, u.graph_id, u.iteration,
       u.op_type,
       coalesce(k.full_name, kb.full_name, kr.full_name, u.op_full_name, u.file_op_name) AS op_name,
       u.file_op_name, u.io, u.slot, u.dtype, u.shape, u.nbytes,
       u.max, u.min, u.avg, u.count, u.neg_count, u.pos_count, u.nan_count,
       u.neg_inf_count, u.pos_inf_count, u.zero_count, u.l2norm, u.md5,
       u.stat_source,
       coalesce(k.exec_index, kb.exec_index, kr.exec_index) AS exec_index,
       os.source_file, os.source_line, os.source_code,
       CASE WHEN k.key IS NOT NULL THEN 'exact' WHEN kb.key IS NOT NULL THEN 'op_index'
            WHEN kr.key IS NOT NULL THEN 'rank' WHEN u.op_full_name IS NOT NULL THEN 'header'
            ELSE 'unresolved' END AS name_match,
       u.timestamp_us, u.mismatch
FROM unioned u
LEFT JOIN op_keys k
       ON k.run = u.run AND k.rank = u.rank AND k.graph_id = u.graph_id AND k.key = u.file_op_name
LEFT JOIN op_keys_base kb
       ON k.key IS NULL AND kb.run = u.run AND kb.rank = u.rank AND kb.graph_id = u.graph_id
      AND kb.key = u.file_op_base
LEFT JOIN op_graphs g
       ON g.run = u.run AND g.rank = u.rank AND g.graph_id = u.graph_id
LEFT JOIN op_keys_rank kr
       ON g.graph_id IS NULL AND kr.run = u.run AND kr.rank = u.rank AND kr.key = u.file_op_name
LEFT JOIN op_source os
       ON os.run = u.run AND os.rank = u.rank AND os.graph_id = u.graph_id
      AND os.full_name = coalesce(k.full_name, kb.full_name, kr.full_name)
