"""The catalog on disk, the layer both sides stand on: the ingest writes through it and the query
side (catalog/) reads through it. Its table schemas (`schema`), batch files and snapshots
(`store`), resolved flat files (`flat`), the writer's DuckDB (`writer_warm_up`), and the SQL of
the raw views and of the flat-file columns (`sql_views`, `flat_columns`). It imports nothing from
the readers, the pipeline or `catalog`."""
