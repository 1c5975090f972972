-- The columns of one view (or table) of the catalog's database, in order, with DuckDB's type names,
-- for the dumpcat:// SQLAlchemy dialect's reflection. Parameters: $schema, $name.
SELECT column_name, data_type, is_nullable
FROM duckdb_columns()
WHERE database_name = current_database() AND schema_name = $schema AND table_name = $name
ORDER BY column_index
