-- overflows: Ascend overflow-debug records (op_debug_mode 3), one row per info block, joined to
-- the operator that overflowed: the tensors in the same dump directory with the block's stream
-- and task id (the Opdebug file's own rows excluded). DHA and L2 blocks of an AI Core overflow
-- usually hold zeros and join no operator. Task ids that several operators of a directory share
-- (dumps that do not record them, e.g. CPU's 0) name no operator rather than a wrong one.
CREATE OR REPLACE VIEW overflow_ops AS
SELECT run, rank, net, graph_id, iteration, task_id, stream_id,
       CASE WHEN count(DISTINCT op_name) = 1 THEN any_value(op_type) END AS op_type,
       CASE WHEN count(DISTINCT op_name) = 1 THEN any_value(op_name) END AS op_name,
       CASE WHEN count(DISTINCT op_name) = 1 THEN any_value(exec_index) END AS exec_index,
       CASE WHEN count(DISTINCT op_name) = 1 THEN any_value(source_file) END AS source_file,
       CASE WHEN count(DISTINCT op_name) = 1 THEN any_value(source_line) END AS source_line,
       list(row_id ORDER BY io, slot, row_id) AS row_ids
FROM tensors
WHERE op_type NOT IN ('Opdebug', 'OpDebug')
GROUP BY run, rank, net, graph_id, iteration, task_id, stream_id;

CREATE OR REPLACE VIEW overflows AS
SELECT o.run, o.rank, o.net, o.graph_id, o.iteration, o.block,
       o.model_id, o.stream_id, o.task_id, o.task_type, o.pc_start, o.para_base, o.status,
       o.kernel_code, o.block_idx,
       op.op_type, op.op_name, op.exec_index, op.source_file, op.source_line, op.row_ids,
       o.timestamp_us, o.rel_path
FROM raw_overflows o
LEFT JOIN overflow_ops op
       ON op.run = o.run AND op.rank = o.rank AND op.net = o.net AND op.graph_id = o.graph_id
      AND op.iteration IS NOT DISTINCT FROM o.iteration
      AND op.task_id = o.task_id AND op.stream_id = o.stream_id;
