"""The processing core: decode, process, emit, timers. No Kafka I/O here, so Spark tasks and tests
run exactly the code the stream runs."""

from stylus.core.engine import Engine, FailureHandler, RaiseFailures, StopProcessing
from stylus.core.message import RawMessage
from stylus.core.sink import CollectingSink, Output, Sink
from stylus.core.task import PartitionTask

__all__ = [
    "CollectingSink",
    "Engine",
    "FailureHandler",
    "Output",
    "PartitionTask",
    "RaiseFailures",
    "RawMessage",
    "Sink",
    "StopProcessing",
]
