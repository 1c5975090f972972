-- Tensors whose statistics are still to be computed from their data (`dumpcat stats`,
-- catalog/missing_stats.py), over the raw tables of one writer's shard: those the ingest path would have
-- computed (ingest --stats) had it run with statistics. Left out: tensors with computed statistics;
-- tensors with a producer's statistic row (statistic.csv, CANN stats CSV), except msprobe's dump.json
-- rows, which have no counts (the `stats` view takes them from the computed row); raw-bytes slots
-- (nothing to decode); files converted from a cataloged raw slot (msaccucmp: the slot has them);
-- and tensors whose computation failed before (their `tensor_stats` row in ingest_errors), as a
-- re-ingest does not retry them either. Ordered by run and directory: tasks are per directory.
SELECT parse_dirpath(t.rel_path, '/') AS dir, t.*
FROM raw_tensors t
WHERE ($run IS NULL OR t.run = $run)
  AND t.source_row_id IS NULL
  AND t.stored_dtype IS DISTINCT FROM 'raw'
  AND NOT EXISTS (SELECT 1 FROM raw_tensor_stats c WHERE c.row_id = t.row_id)
  AND NOT EXISTS (
      SELECT 1 FROM raw_stat_rows s
      WHERE s.row_id = t.row_id AND coalesce(s.stat_semantics, 'mindspore') <> 'msprobe'
  )
  AND NOT EXISTS (
      SELECT 1 FROM raw_ingest_errors e
      WHERE e.run = t.run AND e.rel_path = t.rel_path AND e.stage = 'tensor_stats'
  )
ORDER BY t.run, dir, t.rel_path, t.data_offset
