"""The `stylus` command line."""
