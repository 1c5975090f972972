-- Graph IR: nodes, edges and source lines (graphs/ms_output_trace_code_graph_{g}.pb, or the .ir).

-- ir_nodes: every node of every graph (kernels, virtual nodes such as Load/Depend, parameters).
CREATE OR REPLACE VIEW ir_nodes AS
SELECT run, rank, graph_id, node_key, op_type, full_name, is_parameter, param_name, graph_name,
       attributes, input_types, output_types, output_dtypes, output_shapes,
       device_formats, device_dtypes, device_shapes, source, ir_line
FROM raw_ir_nodes;

-- edges: operand `input_index` of `consumer` is an output of `producer`.
CREATE OR REPLACE VIEW edges AS
SELECT e.run, e.rank, e.graph_id,
       coalesce(p.full_name, p.param_name, e.producer_key) AS producer,
       p.op_type AS producer_type,
       coalesce(c.full_name, c.param_name, e.consumer_key) AS consumer,
       c.op_type AS consumer_type,
       e.input_index, e.kind, e.producer_key, e.consumer_key
FROM raw_edges e
LEFT JOIN raw_ir_nodes p
       ON p.run = e.run AND p.rank = e.rank AND p.graph_id = e.graph_id AND p.node_key = e.producer_key
LEFT JOIN raw_ir_nodes c
       ON c.run = e.run AND c.rank = e.rank AND c.graph_id = e.graph_id AND c.node_key = e.consumer_key;

-- source_lines: every stack frame of every node, outermost (depth 0) first. `is_user_code` is
-- false for frames inside the framework (site-packages/mindspore, dist-packages, <frozen ...>).
CREATE OR REPLACE VIEW source_lines AS
SELECT run, rank, graph_id, full_name, node_key, depth, file, line, line_end, col_start, col_end,
       code, is_user_code
FROM raw_source_lines;

-- op_source: each operator's innermost frame in user code: the line of the user's script that
-- created it.
CREATE OR REPLACE VIEW op_source AS
SELECT run, rank, graph_id, full_name,
       arg_max(file, depth) AS source_file,
       arg_max(line, depth) AS source_line,
       arg_max(code, depth) AS source_code
FROM raw_source_lines
WHERE is_user_code AND full_name IS NOT NULL
GROUP BY run, rank, graph_id, full_name;
