-- modules: msprobe's construct.json, the tree of modules (and, at level mix, the API calls inside
-- them) of one step of one rank: a row per node with its parent (NULL for a root) and its depth
-- (0 for a root). `node` is the entry key, as in `stats.op_name`, so
--   SELECT s.* FROM stats s JOIN modules m USING (run, rank, iteration)
--   WHERE s.op_name = m.node AND m.parent = 'Module.fc1.Linear.forward.0'
-- lists what ran inside a module.
CREATE OR REPLACE VIEW modules AS
SELECT run, rank, iteration, node, parent, depth, micro_step, rel_path
FROM raw_modules;
