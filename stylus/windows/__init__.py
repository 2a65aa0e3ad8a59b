"""Event-time windows on `ctx.state` and timers: tumbling, hopping (sliding) and session windows with
incremental aggregation (count, sum, min, max, mean, top-K, a user reducer)."""

from stylus.windows.aggregates import Aggregate, Count, Max, Mean, Min, Reduce, Sum, TopK
from stylus.windows.assigners import Hopping, Session, Tumbling
from stylus.windows.processor import WindowedProcessor

__all__ = ["Aggregate", "Count", "Hopping", "Max", "Mean", "Min", "Reduce", "Session", "Sum", "TopK", "Tumbling",
           "WindowedProcessor"]
