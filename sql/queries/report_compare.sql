-- `dumpcat report --against`: the points of the iterations drawn ($iterations) from
-- `report_compare_ops`. An iteration with more than $max_points operators is cut into $max_points
-- runs of consecutive operators, each drawn as its worst cosine and max_abs_err.
WITH n AS (SELECT iteration, count(*) AS n FROM report_compare_ops GROUP BY iteration),
b AS (
    SELECT o.*, CASE WHEN n.n <= $max_points THEN o.x ELSE o.x * $max_points // n.n END AS bucket
    FROM report_compare_ops o
    JOIN n USING (iteration)
    WHERE list_contains($iterations, o.iteration)
)
SELECT iteration, bucket, min(x) AS x, count(*) AS ops,
       arg_min(op_name, x) AS op_name, arg_max(op_name, x) AS last_op_name,
       min(cosine) AS cosine, max(max_abs_err) AS max_abs_err,
       string_agg(DISTINCT statuses, ', ') AS statuses
FROM b
GROUP BY iteration, bucket
ORDER BY iteration, bucket;
