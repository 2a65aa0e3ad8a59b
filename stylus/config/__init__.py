"""Pipeline configuration: YAML -> frozen pydantic models."""

from stylus.config.durations import Duration, format_duration, parse_duration
from stylus.config.errors import PipelineError, Problem
from stylus.config.loader import load_pipeline, parse_pipeline
from stylus.config.model import (
    VALID_PAIRS,
    BackupSpec,
    EventTimeSpec,
    Pipeline,
    ProcessorSpec,
    Semantics,
    StateSpec,
    TopicSpec,
)

__all__ = [
    "VALID_PAIRS",
    "BackupSpec",
    "Duration",
    "EventTimeSpec",
    "Pipeline",
    "PipelineError",
    "Problem",
    "ProcessorSpec",
    "Semantics",
    "StateSpec",
    "TopicSpec",
    "format_duration",
    "load_pipeline",
    "parse_duration",
    "parse_pipeline",
]
