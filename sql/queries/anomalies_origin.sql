-- Which rank started it, for `dumpcat anomalies` on a multi-rank run: one row per step (nan_origin)
-- of the runs with more than one rank (anomalous ranks, or ranks that ran collectives): the origin,
-- then how each other rank received it.
SELECT o.run, o.iteration, o.origin_rank,
       o.op_name, o.source_file || ':' || o.source_line AS source, o.source_code,
       CASE WHEN o.new_origin THEN 'born here' ELSE 'from step ' || o.origin_iteration END AS origin,
       array_to_string(list_transform(o.reached, lambda r: r.rank || ' <- ' || r.collective || '#' || r.instance
                                                  || ' from ' || array_to_string(r.from_ranks, ',')), '; ')
           AS reached,
       array_to_string(o.inherited_ranks, ',') AS inherited,
       array_to_string(list_transform(o.second_origins, lambda s: s.rank || ' ' || s.op_name), '; ') AS second_origins
FROM nan_origin o
WHERE ($run IS NULL OR o.run = $run)
  AND (o.anomalous_ranks > 1
       OR o.run IN (SELECT run FROM communication_ops GROUP BY run HAVING count(DISTINCT rank) > 1))
ORDER BY o.run, o.iteration;
