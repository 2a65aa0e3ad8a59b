#!/bin/sh
# Storm's SplitSentence as a Swift-style executable processor (docs/executable.md), in jq rather than Python.
# Reads one JSON line per input record ({"key", "value", "timestamp", "topic", "partition", "offset"}); the
# sentence is the value (a string, or an object's `sentence` field). Answers each line with exactly one line:
# a JSON list with one output per word, keyed by the word (Storm's fields grouping: a word's counts meet in
# one partition downstream). `exec`, so the framework's pid is jq's; `--unbuffered`, so every answer is
# flushed at once (an answer held in a buffer is no acknowledgement).
exec jq --unbuffered --compact-output '
  [ .value
    | (if type == "object" then .sentence else . end)
    | (if type == "string" then ascii_downcase else "" end)
    | [scan("[a-z0-9]+")][]
    | {key: ., value: {word: .}} ]'
