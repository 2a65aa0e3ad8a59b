"""Event time: per-partition watermark estimates, watermarks carried across stages, late-data policies."""
