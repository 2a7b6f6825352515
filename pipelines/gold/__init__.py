"""Gold: report aggregates as Spark SQL over silver, materialized as Delta
(docs/architecture.md, Gold).

- `reports`: the report catalogue (SQL file, declared schema, silver tables it reads);
- `sql/*.sql`: one query per report, over plain view names (`users`, `time_entries`, ...);
- `conform`: DataFrame -> DataFrame cast to the declared schema, and its validation;
- `io`: the edges (silver views in, gold tables out), swappable for Unity Catalog names;
- `run`: `run_gold`, one full recompute of the selected reports;
- `display`: small text tables for humans; `command`: the `lakehouse gold` verb.
Kept free of imports here so the CLI can build its parser without loading PySpark.
"""
