"""The demo: a time-tracking database, its workload, and `lakehouse demo`."""
