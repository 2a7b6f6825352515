"""`lakehouse recover`: continue in place after a lost slot or a failover."""
