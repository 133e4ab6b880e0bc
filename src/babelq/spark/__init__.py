"""Spark (PySpark) integration: envelopes as DataFrames, the ``babelq`` data source, pipelines.

Importing this package does not import pyspark; its modules do, when used.
"""
