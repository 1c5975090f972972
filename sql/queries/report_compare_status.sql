-- `dumpcat report --against`: how the pairs of $run and $baseline compared, by status.
SELECT status, count(*) AS tensors, count(*) FILTER (WHERE io = 'output') AS outputs
FROM comparisons
WHERE run = $run AND baseline_run = $baseline
GROUP BY status
ORDER BY tensors DESC, status;
