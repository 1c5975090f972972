-- The views of the connection's current database (the catalog's views) in one schema, for the
-- dumpcat:// SQLAlchemy dialect's reflection (catalog/sqlalchemy_dialect.py lists the user views
-- among them). Parameter: $schema.
SELECT view_name
FROM duckdb_views()
WHERE database_name = current_database() AND schema_name = $schema AND NOT internal
ORDER BY view_name
