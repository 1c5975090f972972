-- fx_links: TorchAir's link between the GE graph and the FX graph it was converted from. Each GE op
-- output carrying `_fx_tensor_name` (`{node}-{aten op}.OUTPUT.{i}`) is joined to the FX eager dump
-- of that tensor (producer 'torchair-fx') and to the GE raw dump of the op's output (same rank,
-- iteration = token), so the two can be compared value by value:
--   SELECT ge_op, fx_node, iteration, ge_row_id, fx_row_id FROM fx_links;
CREATE OR REPLACE VIEW fx_links AS
WITH links AS (
    SELECT l.*,
           regexp_extract(l.fx_tensor_name, '^(.*)\.OUTPUT\.([0-9]+)$', 1) AS fx_op,
           TRY_CAST(regexp_extract(l.fx_tensor_name, '^(.*)\.OUTPUT\.([0-9]+)$', 2) AS INTEGER) AS fx_slot
    FROM raw_fx_links l
)
SELECT l.run, l.rank, fx.iteration, l.ge_op, l.ge_op_type, l.output_index, l.fx_tensor_name,
       split_part(l.fx_op, '-', 1) AS fx_node, fx.op_type AS fx_aten_op,
       ge.row_id AS ge_row_id, fx.row_id AS fx_row_id, l.graph_name, l.graph_path
FROM links l
LEFT JOIN raw_tensors fx
       ON fx.run = l.run AND fx.rank IS NOT DISTINCT FROM l.rank AND fx.producer = 'torchair-fx'
      AND fx.op_full_name = l.fx_op AND fx.io = 'output' AND fx.slot = l.fx_slot
LEFT JOIN raw_tensors ge
       ON ge.run = l.run AND ge.rank IS NOT DISTINCT FROM l.rank AND ge.producer = 'ascend-raw'
      AND ge.iteration IS NOT DISTINCT FROM fx.iteration AND ge.io = 'output'
      AND ge.slot = coalesce(l.output_index, 0)
      AND (ge.op_full_name = l.ge_op OR ge.file_op_name = replace(replace(l.ge_op, '/', '_'), '.', '_'));
