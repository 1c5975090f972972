-- ingest_errors: every file (or line of a file) that could not be cataloged, and why.
-- An error that kept a tensor file out of the catalog is hidden once the file was cataloged later
-- (it was still being written). A `tensor_stats` error is about a cataloged tensor: always shown.
CREATE OR REPLACE VIEW ingest_errors AS
SELECT e.run, e.rel_path AS path, e.stage, e.reason, e.file_size, e.at
FROM raw_ingest_errors e
WHERE e.stage = 'tensor_stats'
   OR NOT EXISTS (SELECT 1 FROM raw_tensors t WHERE t.run = e.run AND t.rel_path = e.rel_path);

-- kernel_args: arguments of each kernel (`{op_type}.{op_name}.json`, save_kernel_args).
CREATE OR REPLACE VIEW kernel_args AS
SELECT run, rank, net, graph_id, iteration, op_type, file_op_name, arg_name, arg_value, rel_path
FROM raw_kernel_args;
