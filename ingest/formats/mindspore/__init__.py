"""MindSpore's own files, bytes to values: tensor file names and `mapping.csv`, `statistic.csv`,
the execution-order csvs, the graph IR (`.ir` text and `.pb`), kernel args and `.dump_metadata/`,
and the names of the 1.x layouts."""
