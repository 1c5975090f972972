-- `dumpcat report`: the operators (rows) of the heat map, kept as `report_heat_ops`, in execution
-- order (the earliest place the operator takes in any step; `y` numbers them). All of them when the
-- run has at most $max_ops; otherwise the $max_ops that matter most: a step's first anomaly before
-- anything else, then those anomalous in the most (rank, iteration) cells.
WITH ops AS (
    SELECT op_name, any_value(op_type) AS op_type, min(pos) AS pos,
           count(*) FILTER (WHERE anomalous > 0) AS anomalous_cells,
           sum(anomalous) AS anomalous, bool_or(is_first) AS is_first
    FROM report_cells
    GROUP BY op_name
),
ranked AS (
    SELECT *, row_number() OVER (ORDER BY is_first DESC, anomalous_cells DESC, anomalous DESC, pos, op_name)
              AS importance
    FROM ops
)
SELECT op_name, op_type, pos, anomalous_cells, is_first,
       row_number() OVER (ORDER BY pos, op_name) - 1 AS y,
       count(*) OVER () AS shown, (SELECT count(*) FROM ops) AS total
FROM ranked
WHERE importance <= $max_ops
ORDER BY y;
