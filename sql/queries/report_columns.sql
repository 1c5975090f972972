-- `dumpcat report`: the columns of the heat map and the trend lines, kept as `report_columns`.
-- One column per iteration of `report_cells`; a run with more than $max_columns iterations gets
-- $max_columns equal ranges of iterations instead (each cell then shows the worst of its range).
WITH its AS (SELECT DISTINCT iteration FROM report_cells),
span AS (SELECT count(*) AS n, min(iteration) AS lo, max(iteration) AS hi FROM its),
binned AS (
    SELECT i.iteration,
           CASE WHEN s.n <= $max_columns THEN i.iteration
                ELSE (i.iteration - s.lo) * $max_columns // (s.hi - s.lo + 1) END AS bin
    FROM its i, span s
),
numbered AS (SELECT iteration, dense_rank() OVER (ORDER BY bin) - 1 AS col FROM binned)
SELECT iteration, col,
       min(iteration) OVER (PARTITION BY col) AS first_iteration,
       max(iteration) OVER (PARTITION BY col) AS last_iteration
FROM numbered;
