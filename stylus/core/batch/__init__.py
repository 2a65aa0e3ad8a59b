"""The columnar batch path (docs/batch.md): `BatchEngine` runs a `stylus.BatchProcessor` over consecutive records
of one input partition as a `pyarrow.RecordBatch`, with the per-record engine's guarantees. Needs the `batch`
extra; `stylus.core.engines.engine_for` picks this engine for batch processors.

    columns.py   a partition's run of messages, read once, and its RecordBatch (decoded by the topic's serde)
    encode.py    a table's rows as output records: values encoded column-wise, keys, timestamps
    context.py   `ctx` of a batch processor: `emit_batch`, `forward`, buffered timers, bulk state
    engine.py    BatchEngine: runs per partition, control records, event time and late rows, bisection
    ops.py       vectorised helpers for processors: running totals per key, group keys as text
"""
