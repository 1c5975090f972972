-- `dumpcat report`: ingest_errors of the runs shown ($runs), summarised by stage, with one example.
SELECT stage, count(*) AS errors, count(DISTINCT run) AS runs,
       arg_min(path, "at") AS example_path, arg_min(reason, "at") AS example_reason
FROM ingest_errors
WHERE list_contains($runs, run)
GROUP BY stage
ORDER BY errors DESC, stage;
