"""`lakehouse verify`: every silver table against the live source, row by row.

Kept free of imports here so the CLI can build its parser without loading PySpark.
"""
