"""Apache Superset against `dumpcat serve`: its installer, a harness and a screenshot script."""
