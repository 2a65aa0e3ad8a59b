"""Backfill and replay: the processor's own code run on Spark over historical input (Kafka and/or the
Parquet archive). The driver plans offset ranges; Spark tasks read them and run `stylus.core.Engine`."""
