"""Gold: the user's report aggregates as Spark SQL over silver, materialized as Delta
(docs/architecture.md, Gold; docs/gold.md).

- `definitions`: the report files of `gold.reports`, read and checked without Spark;
- `conform`: DataFrame -> DataFrame cast to a report's columns, and its validation;
- `io`: the edges (the tables a report reads, in as temp views; gold tables out),
  swappable for Unity Catalog names;
- `run`: `run_gold`, one full recompute of the selected reports in dependency order;
- `display`: small text tables for humans; `command`: the `lakehouse gold` verb.
Kept free of imports here so the CLI can build its parser without loading PySpark.
"""
