"""`lakehouse status`: every layer's freshness, the lake's read with delta-rs (no Spark)."""
