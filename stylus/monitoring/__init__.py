"""Monitoring: Prometheus metrics, lag, alert rules, dashboards and the built-in status page."""
