-- `dumpcat report --against`: the iterations drawn, at most $max_iterations of `report_compare_ops`,
-- evenly spaced over the run (the first and the last always among them).
WITH its AS (SELECT DISTINCT iteration FROM report_compare_ops),
k AS (SELECT iteration, row_number() OVER (ORDER BY iteration) - 1 AS k, count(*) OVER () AS n FROM its)
SELECT iteration
FROM k
WHERE n <= $max_iterations
   OR k = round(round(k * ($max_iterations - 1) / (n - 1)) * (n - 1) / ($max_iterations - 1))
ORDER BY iteration;
