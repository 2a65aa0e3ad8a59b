"""Stylus for Python: realtime processors on Kafka with local RocksDB state."""

from stylus.api import BatchContext, BatchProcessor, Context, Processor, Record

__all__ = ["BatchContext", "BatchProcessor", "Context", "Processor", "Record"]
__version__ = "0.1.0"
