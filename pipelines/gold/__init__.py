"""Gold: the user's report aggregates as Spark SQL over silver, materialized as Delta
(docs/architecture.md, Gold; docs/gold.md).

- `definitions`: the report files of `gold.reports`, read and checked without Spark;
- `names`: the tables a report's SQL names (`TableName`), found with sqlglot;
- `conform`: DataFrame -> DataFrame cast to a report's columns, and its validation;
- `io`: the edges (the tables a report reads, in as temp views; gold tables out),
  swappable for Unity Catalog names;
- `grouping`: an `incremental by` column traced to a row expression over one silver
  table (sqlglot's lineage, no Spark);
- `build`: one report built, checked and written whole;
- `refresh`: an incremental report refreshed by the groups that changed;
- `state`: each report's last refresh and an incremental report's group index (delta-rs);
- `run`: `run_gold`, the selected reports refreshed in dependency order;
- `display`: small text tables for humans; `command`: the `lakehouse gold` verb.
Kept free of imports here so the CLI can build its parser without loading PySpark.
"""
