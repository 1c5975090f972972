-- How a name in a tensor file (or statistic.csv row) is resolved to its full scope name.
--
-- File names carry a *sanitised* op name: v2.3+ the full name with `/ \ . space` -> `_`,
-- v1.3-2.2 only the last scope component. Sanitising is not invertible, so instead every
-- operator of the execution order is given both file-name forms as keys, and a key resolves
-- only when exactly one operator has it. `raw_ops` already holds both forms (computed at ingest
-- with MindSpore's own replacement rule).
--
-- A graph with no execution order (older dumps, partial copies, trees assembled by hand) still
-- has its graph IR, which names every operator: its IR nodes take the execution order's place,
-- with the same forms and the same uniqueness rule, and no execution index (such tensors are
-- ordered by their timestamps; see 60_first_anomaly.sql).

-- Operators named by the graph IR of graphs that have no execution order. The forms are built
-- here with the rule `ingest.formats.mindspore.npy_name` applies to the execution order (a test checks that both
-- agree on every sample).
CREATE OR REPLACE VIEW ir_ops AS
WITH named AS (
    SELECT DISTINCT n.run, n.rank, n.graph_id, n.full_name,
           replace(replace(replace(replace(n.full_name, '/', '_'), '\', '_'), '.', '_'), ' ', '_')
               AS sanitized_name
    FROM raw_ir_nodes n
    WHERE NOT n.is_parameter AND n.full_name IS NOT NULL AND n.full_name <> ''
      AND NOT EXISTS (SELECT 1 FROM raw_ops o
                      WHERE o.run = n.run AND o.rank = n.rank AND o.graph_id = n.graph_id)
)
SELECT run, rank, graph_id, CAST(NULL AS INTEGER) AS exec_index, full_name, sanitized_name,
       regexp_extract(full_name, '[^/]*$') AS short_name,
       regexp_replace(sanitized_name, '-op[0-9]+$', '') AS base_name
FROM named;

-- Every operator a file name can be resolved against: the execution order's kernels, and the
-- IR's operators where a graph has no execution order.
CREATE OR REPLACE VIEW op_names AS
SELECT run, rank, graph_id, exec_index, full_name, sanitized_name, short_name, base_name FROM raw_ops
UNION ALL
SELECT run, rank, graph_id, exec_index, full_name, sanitized_name, short_name, base_name FROM ir_ops;

-- Both file-name forms of every operator's name: the v2.3+ sanitised full name and the
-- v1.3-2.2 short name.
CREATE OR REPLACE VIEW op_key_forms AS
SELECT run, rank, graph_id, exec_index, full_name, sanitized_name AS key FROM op_names
UNION ALL
SELECT run, rank, graph_id, exec_index, full_name, short_name AS key FROM op_names
WHERE short_name <> sanitized_name;

-- Keys unique within one kernel graph: the exact match.
CREATE OR REPLACE VIEW op_keys AS
SELECT run, rank, graph_id, key, any_value(full_name) AS full_name, any_value(exec_index) AS exec_index
FROM op_key_forms
GROUP BY run, rank, graph_id, key
HAVING count(DISTINCT full_name) = 1;

-- Keys unique within a rank: used only for a dump directory whose graph id has no execution
-- order of its own (Ascend names dump directories by root graph, execution orders by kernel
-- graph). The execution index is kept only when the operator sits in one graph.
CREATE OR REPLACE VIEW op_keys_rank AS
SELECT run, rank, key, any_value(full_name) AS full_name,
       CASE WHEN count(*) = 1 THEN any_value(exec_index) END AS exec_index
FROM op_key_forms
GROUP BY run, rank, key
HAVING count(DISTINCT full_name) = 1;

-- Keys without the `-opN` suffix, unique within a kernel graph. Real MindSpore 2.10 dumps of a
-- graph compiled a second time name files `...Conv2D-op1` while the execution order says
-- `...Conv2D-op0`; the scope and kernel type still identify the operator when only one
-- operator of the graph has them.
CREATE OR REPLACE VIEW op_keys_base AS
SELECT run, rank, graph_id, base_name AS key,
       any_value(full_name) AS full_name, any_value(exec_index) AS exec_index
FROM op_names
GROUP BY run, rank, graph_id, base_name
HAVING count(DISTINCT full_name) = 1;

-- Graphs whose operators are known (from the execution order or the graph IR).
CREATE OR REPLACE VIEW op_graphs AS
SELECT DISTINCT run, rank, graph_id FROM op_names;
