"""How the tests run each engine: the config's name for it, and classic Spark's settings."""

CONFIG_ENGINES = {"sail": "local", "spark": "spark"}  # pytest --engine -> config `engine`

# Classic Spark for tiny tables. Delta rebuilds a table's state from its log in 50 tasks
# by default, which dominates every read of a small table on two cores. Compiling
# generated code costs more than it saves on a few rows: a silver run of the job tests'
# two tables took 9-10 s interpreted against 12-13 s compiled (warm, median of 4).
# Adaptive execution runs each shuffle as a job of its own and has nothing to coalesce
# in 2 partitions: off, a history replay starts a third fewer jobs (0.94x the time). The
# demo, the notebooks and the cluster test run with the engine's defaults, so generated
# code and adaptive execution are exercised too.
CLASSIC_TEST_CONF = {"spark.sql.shuffle.partitions": "2",
                     "spark.databricks.delta.snapshotPartitions": "2",
                     "spark.default.parallelism": "2",
                     "spark.sql.adaptive.enabled": "false",
                     "spark.sql.codegen.wholeStage": "false",
                     "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
