"""Scale-out on Apache Spark (front end; pyspark is optional).

- `spark_sql.py`: the catalog's views as temporary views of a SparkSession (`register_views`);
- `jobs.py`: the tasks `dumpcat stats --spark` and `dumpcat compare --spark` run on executors.
"""
