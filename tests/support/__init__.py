"""Helpers shared by tests: producing, reading, running the CLI as a real process."""
