-- `dumpcat report`: the operators that were a step's first anomaly, most frequent first (at scale
-- the per-step table is cut; this one says which lines to look at).
SELECT op_name, any_value(op_type) AS op_type,
       any_value(source_file) AS source_file, any_value(source_line) AS source_line,
       any_value(source_code) AS source_code,
       count(*) AS steps, count(DISTINCT rank) AS ranks,
       min(iteration) AS first_iteration, max(iteration) AS last_iteration,
       arg_min(row_id, (iteration, rank)) AS first_row_id
FROM report_first
GROUP BY op_name
ORDER BY steps DESC, first_iteration, op_name
LIMIT $limit;
