"""`lakehouse sql`: Spark SQL over the lake's silver and gold tables by the names analysts
use on Databricks, less the catalog (docs/sql.md)."""
