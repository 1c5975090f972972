-- Operators a source line created, with their tensors' row ids per iteration.
-- Parameters: $file (a path or its tail, e.g. 'train.py'), $line (NULL to match by code),
-- $code (a fragment of the source line, NULL to match by line), $exact (true: $code is the whole
-- line, comment included). Code is compared case-sensitively with runs of white space read as one
-- space: `self.log(` finds `x = self.log(x)  # NaN here`.
--
-- A frame matches by line when it starts at $line, or when it is the operator's innermost user
-- frame and spans $line (a statement over several lines); whole-function frames
-- (`def construct`, lines 14~18) therefore match only their `def` line.
WITH innermost AS (
    SELECT run, rank, graph_id, node_key, max(depth) AS depth
    FROM source_lines
    WHERE is_user_code
    GROUP BY ALL
),
hits AS (
    SELECT DISTINCT s.run, s.rank, s.graph_id, s.full_name, s.file, s.line, s.code
    FROM source_lines s
    LEFT JOIN innermost i
           ON i.run = s.run AND i.rank = s.rank AND i.graph_id = s.graph_id
          AND i.node_key = s.node_key AND i.depth = s.depth
    WHERE s.is_user_code AND s.full_name IS NOT NULL
      AND ($file IS NULL OR s.file = $file OR s.file LIKE '%/' || $file)
      AND ($line IS NULL OR s.line = $line
           OR (i.depth IS NOT NULL AND $line BETWEEN s.line AND coalesce(s.line_end, s.line)))
      AND ($code IS NULL OR CASE WHEN $exact
               THEN regexp_replace(trim(s.code), '\s+', ' ', 'g') = regexp_replace(trim($code), '\s+', ' ', 'g')
               ELSE contains(regexp_replace(trim(s.code), '\s+', ' ', 'g'), regexp_replace(trim($code), '\s+', ' ', 'g'))
           END)
)
SELECT h.file, h.line, h.code, h.run, h.rank, h.graph_id, h.full_name AS op_name,
       t.iteration, list(t.row_id ORDER BY t.io DESC, t.slot) AS row_ids,
       list(t.io || '.' || t.slot ORDER BY t.io DESC, t.slot) AS tensors
FROM hits h
LEFT JOIN tensors t
       ON t.run = h.run AND t.rank = h.rank AND t.graph_id = h.graph_id AND t.op_name = h.full_name
GROUP BY ALL
ORDER BY h.run, h.rank, h.graph_id, h.line, h.full_name, t.iteration;
