-- `dumpcat report`, heat map cells: per rank, operator (`report_heat_ops`) and column
-- (`report_columns`): 2 when the operator is a step's first anomaly there, 1 when its outputs hold
-- NaN/Inf (propagated), 0 when they are clean; with the tensors and elements behind it.
-- Ranks: the $max_ranks with the most anomalous cells (all of them in most runs), in rank order.
WITH ranks AS (
    SELECT rank
    FROM report_cells
    GROUP BY rank
    ORDER BY count(*) FILTER (WHERE anomalous > 0) DESC, rank
    LIMIT $max_ranks
)
SELECT c.rank, o.y, k.col,
       max(CASE WHEN c.is_first THEN 2 WHEN c.anomalous > 0 THEN 1 ELSE 0 END) AS category,
       sum(c.anomalous) AS anomalous, sum(c.tensors) AS tensors,
       sum(c.nan_elements) AS nan_elements, sum(c.inf_elements) AS inf_elements
FROM report_cells c
JOIN ranks USING (rank)
JOIN report_heat_ops o USING (op_name)
JOIN report_columns k USING (iteration)
GROUP BY c.rank, o.y, k.col
ORDER BY c.rank, o.y, k.col;
