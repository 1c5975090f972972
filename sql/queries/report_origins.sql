-- `dumpcat report`, heat map: the ranks where a NaN/Inf was born (nan_origin), with the steps it was
-- born in, to mark them in the rank menu.
SELECT origin_rank AS rank, list(iteration ORDER BY iteration) AS iterations
FROM nan_origin
WHERE run = $run AND new_origin
GROUP BY origin_rank
ORDER BY origin_rank;
