-- stats: one row per tensor statistic.
--
-- Rows come from the producer's own statistics where it wrote them (stat_source: 'statistic.csv'
-- of MindSpore, 'cann_stats_csv' of CANN/GE `dump_data: stats`, 'dump.json' of msprobe) and are
-- computed by dumpcat from the tensor data otherwise (stat_source = 'computed'; CPU dumps cannot
-- write statistic.csv). A tensor with a producer's row never also shows a computed row.
--
-- stat_semantics says whose definitions a row's values follow:
--   'mindspore'  max/min/avg over all elements, so a NaN makes them NaN; counts as named;
--   'cann'       max/min skip NaN (±Inf count); avg is the mean of the finite values, NaN when a
--                NaN or both infinities are present; integer tensors report 0 NaN/Inf;
--   'msprobe'    Max/Min/Mean/Norm over all elements (a NaN makes Max and Min NaN); no counts of
--                its own: the counts shown are dumpcat's, from the saved tensor, when there is one;
--   'dumpcat'    computed here, MindSpore's definitions.
-- has_nan / has_inf answer "does this tensor hold NaN / Inf" under every one of them.
--
-- Like `tensors_resolved`, `stats_resolved` resolves at query time and dumpcat stores its result
-- per batch at commit time (the flat table `stats` reads). The rows to resolve come from
-- `src_stat_rows` and `src_tensor_stats`; the lookups across rows (does a tensor have a
-- producer's row? dumpcat's counts of an msprobe tensor) read the raw tables, so they see the
-- whole catalog whichever rows are being resolved.
--
-- The name-resolution joins below are the same as in 30_tensors.sql on purpose: joining `stats`
-- to the `tensors` view instead would cost a join over every tensor on each query, where these
-- joins only touch the (small) operator tables after the WHERE clause has filtered the rows.
CREATE OR REPLACE VIEW src_stat_rows AS SELECT * FROM raw_stat_rows;
CREATE OR REPLACE VIEW src_tensor_stats AS SELECT * FROM raw_tensor_stats;

CREATE OR REPLACE VIEW stats_resolved AS
WITH unioned AS (
    SELECT s.row_id, s.stat_id, s.run, s.rank, s.net, s.graph_id, s.iteration, s.op_type, s.file_op_name,
           s.file_op_base, s.timestamp_us, s.io, s.slot, s.data_type AS dtype, s.shape, s.data_size AS nbytes,
           s.max, s.min, s.avg,
           -- msprobe's dump.json has no counts: those of its tensors saved with the data
           -- (task 'tensor') are computed by dumpcat and filled in here.
           coalesce(s.count, c.count) AS count, coalesce(s.neg_count, c.neg_count) AS neg_count,
           coalesce(s.pos_count, c.pos_count) AS pos_count, coalesce(s.nan_count, c.nan_count) AS nan_count,
           coalesce(s.neg_inf_count, c.neg_inf_count) AS neg_inf_count,
           coalesce(s.pos_inf_count, c.pos_inf_count) AS pos_inf_count,
           coalesce(s.zero_count, c.zero_count) AS zero_count, s.l2norm, s.md5,
           coalesce(s.stat_source, 'statistic.csv') AS stat_source,
           coalesce(s.stat_semantics, 'mindspore') AS stat_semantics, s.mismatch,
           s.op_full_name, s.exec_index, s.arg_path, s.requires_grad
    FROM src_stat_rows s
    LEFT JOIN raw_tensor_stats c ON s.stat_semantics = 'msprobe' AND c.row_id = s.row_id
    UNION ALL
    SELECT row_id, NULL AS stat_id, run, rank, net, graph_id, iteration, op_type, file_op_name, file_op_base,
           timestamp_us, io, slot, dtype, shape, nbytes,
           max, min, avg, count, neg_count, pos_count, nan_count, neg_inf_count, pos_inf_count,
           zero_count, l2norm, md5, 'computed' AS stat_source, 'dumpcat' AS stat_semantics,
           -- a float16 tensor whose file holds 4 bytes an element: MindSpore dumped a float32
           -- kernel's buffer under a float16 header (ingest/formats/npy_header.py `stored_as`)
           CASE WHEN dtype_name(dtype) = 'float16' AND count > 0 AND nbytes = 4 * count THEN 'dtype' END AS mismatch,
           op_full_name, CAST(NULL AS BIGINT) AS exec_index,
           CAST(NULL AS VARCHAR) AS arg_path, CAST(NULL AS BOOLEAN) AS requires_grad
    FROM src_tensor_stats c
    WHERE NOT EXISTS (SELECT 1 FROM raw_stat_rows s WHERE s.row_id = c.row_id)
)
SELECT u.row_id, u.stat_id, u.run, u.rank, u.net, u.graph_id, u.iteration,
       u.op_type,
       coalesce(k.full_name, kb.full_name, kr.full_name, u.op_full_name, u.file_op_name) AS op_name,
       u.file_op_name, u.io, u.slot, dtype_name(u.dtype) AS dtype, u.dtype AS producer_dtype, u.shape, u.nbytes,
       u.max, u.min, u.avg, u.count, u.neg_count, u.pos_count, u.nan_count,
       u.neg_inf_count, u.pos_inf_count, u.zero_count, u.l2norm, u.md5,
       u.stat_source,
       coalesce(k.exec_index, kb.exec_index, kr.exec_index, u.exec_index) AS exec_index,
       os.source_file, os.source_line, os.source_code,
       CASE WHEN k.key IS NOT NULL THEN 'exact' WHEN kb.key IS NOT NULL THEN 'op_index'
            WHEN kr.key IS NOT NULL THEN 'rank' WHEN u.op_full_name IS NOT NULL THEN 'header'
            ELSE 'unresolved' END AS name_match,
       u.timestamp_us, u.mismatch,
       u.stat_semantics, u.arg_path, u.requires_grad,
       -- Does the tensor hold NaN / ±Inf? By the counts when the row has them; otherwise by what
       -- the producer's definitions allow: MindSpore and msprobe let a NaN through to max and min,
       -- CANN skips NaN in max/min but not in its average (NULL: the row cannot tell). A statistic
       -- the producer was not asked for (statistic.csv's categories) is no evidence either way: a
       -- row of finite max and min and no average holds no NaN (false, not NULL).
       CASE WHEN u.nan_count IS NOT NULL THEN u.nan_count > 0
            WHEN u.stat_semantics = 'cann' THEN isnan(u.avg)
            WHEN u.max IS NULL AND u.min IS NULL AND u.avg IS NULL THEN NULL
            ELSE coalesce(isnan(u.max), false) OR coalesce(isnan(u.min), false)
                 OR coalesce(isnan(u.avg), false) END AS has_nan,
       CASE WHEN u.neg_inf_count IS NOT NULL OR u.pos_inf_count IS NOT NULL
                THEN coalesce(u.neg_inf_count, 0) + coalesce(u.pos_inf_count, 0) > 0
            WHEN u.max IS NULL AND u.min IS NULL THEN NULL
            ELSE coalesce(isinf(u.max), false) OR coalesce(isinf(u.min), false) END AS has_inf
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
       ON os.run = u.run AND os.rank = u.rank AND os.graph_id IS NOT DISTINCT FROM u.graph_id
      AND os.full_name = coalesce(k.full_name, kb.full_name, kr.full_name, u.op_full_name);

-- What users query; redefined over the flat table by catalog/views.py when the catalog has one.
CREATE OR REPLACE VIEW stats AS SELECT * FROM stats_resolved;
