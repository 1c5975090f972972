-- `dumpcat report`, first-anomaly table: the first $limit steps of `report_first`
-- (report_first_anomaly.sql) in step order, with how many steps there are in all.
SELECT *, count(*) OVER () AS steps
FROM report_first
ORDER BY iteration NULLS LAST, rank
LIMIT $limit;
