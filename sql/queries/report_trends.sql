-- `dumpcat report`, trend lines: per operator and column (`report_columns`), its outputs' largest
-- finite l2norm and max and smallest finite min over every rank (`report_cells`).
-- Movers: how far an operator's l2norm moved over the run, log10(largest / smallest positive
-- value over the columns) (explosion and vanishing alike); operators with fewer than two such
-- values have no trend. Only the $top_k largest movers (highlighted) and the next $others are
-- returned.
WITH per_col AS (
    SELECT c.op_name, k.col, max(c.l2norm) AS l2norm, max(c.max) AS max, min(c.min) AS min,
           bool_or(c.nonfinite) AS nonfinite
    FROM report_cells c
    JOIN report_columns k USING (iteration)
    GROUP BY c.op_name, k.col
),
scored AS (
    SELECT op_name,
           log10(max(l2norm) FILTER (WHERE l2norm > 0) / min(l2norm) FILTER (WHERE l2norm > 0)) AS moved
    FROM per_col
    GROUP BY op_name
    HAVING count(*) FILTER (WHERE l2norm > 0) >= 2
),
ranked AS (SELECT op_name, moved, row_number() OVER (ORDER BY moved DESC, op_name) AS mover_rank FROM scored),
ops AS (SELECT op_name, any_value(op_type) AS op_type, min(pos) AS pos FROM report_cells GROUP BY op_name)
SELECT r.mover_rank, r.mover_rank <= $top_k AS top, r.moved, p.op_name, o.op_type, o.pos,
       p.col, p.l2norm, p.max, p.min, p.nonfinite
FROM per_col p
JOIN ranked r USING (op_name)
JOIN ops o USING (op_name)
WHERE r.mover_rank <= $top_k + $others
ORDER BY r.mover_rank, p.col;
