-- tensors: one row per tensor file, with its operator's full scope name when it resolves.
--
-- `tensors_resolved` resolves names at query time, from `src_tensors` (the rows to resolve: every
-- `raw_tensors` row here). dumpcat runs this same view once at commit time over each new batch
-- (pointing `src_tensors` at the batch's file) and stores the result sorted by row id: the flat
-- table `tensors` reads when the catalog has one (ingest/storage/flat.py); older catalogs read the view.
CREATE OR REPLACE VIEW src_tensors AS SELECT * FROM raw_tensors;

-- run_roots: one row per run with its dump root, NULL when writers on several hosts ingested the
-- run from several roots (`--writer`): each writer resolves its own rows at commit time, so the
-- flat `tensors` has every row's path; only a query-time resolution (an export, a catalog from
-- before flat files) cannot tell which root a row is under, and leaves `path` NULL.
CREATE OR REPLACE VIEW run_roots AS
SELECT run, CASE WHEN count(DISTINCT dump_root) = 1 THEN min(dump_root) END AS dump_root
FROM raw_runs
GROUP BY run;

CREATE OR REPLACE VIEW tensors_resolved AS
SELECT t.row_id, t.run, t.rank, t.net, t.graph_id, t.iteration, t.dir_kind,
       t.op_type,
       coalesce(k.full_name, kb.full_name, kr.full_name, t.op_full_name, t.file_op_name) AS op_name,
       t.file_op_name, t.io, t.slot,
       dtype_name(t.dtype) AS dtype, t.dtype AS producer_dtype, t.stored_dtype, t.shape, t.format,
       coalesce(k.exec_index, kb.exec_index, kr.exec_index) AS exec_index,
       os.source_file, os.source_line, os.source_code,
       CASE WHEN k.key IS NOT NULL THEN 'exact' WHEN kb.key IS NOT NULL THEN 'op_index'
            WHEN kr.key IS NOT NULL THEN 'rank' WHEN t.op_full_name IS NOT NULL THEN 'header'
            ELSE 'unresolved' END AS name_match,
       t.task_id, t.stream_id, t.timestamp_us,
       r.dump_root || '/' || t.rel_path AS path,
       t.rel_path, t.file_name, t.original_name,
       t.data_offset, t.nbytes, t.file_size, t.name_era,
       t.producer, t.host_shape, t.source_row_id
FROM src_tensors t
LEFT JOIN op_keys k
       ON k.run = t.run AND k.rank = t.rank AND k.graph_id = t.graph_id AND k.key = t.file_op_name
LEFT JOIN op_keys_base kb
       ON k.key IS NULL AND kb.run = t.run AND kb.rank = t.rank AND kb.graph_id = t.graph_id
      AND kb.key = t.file_op_base
LEFT JOIN op_graphs g
       ON g.run = t.run AND g.rank = t.rank AND g.graph_id = t.graph_id
LEFT JOIN op_keys_rank kr
       ON g.graph_id IS NULL AND kr.run = t.run AND kr.rank = t.rank AND kr.key = t.file_op_name
LEFT JOIN op_source os
       ON os.run = t.run AND os.rank = t.rank AND os.graph_id IS NOT DISTINCT FROM t.graph_id
      AND os.full_name = coalesce(k.full_name, kb.full_name, kr.full_name, t.op_full_name)
LEFT JOIN run_roots r ON r.run = t.run;

-- What users query; redefined over the flat table by catalog/views.py when the catalog has one.
CREATE OR REPLACE VIEW tensors AS SELECT * FROM tensors_resolved;
