"""Silver: typed current-state tables built from bronze with last-writer-wins MERGE."""
