"""`lakehouse run`: the ingest as a child process, silver and gold in a loop beside it.

Kept free of imports here so the CLI can build its parser without loading PySpark.
"""
