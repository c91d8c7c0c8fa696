"""Built-in tools the model may call: search of the raw log, recall of earlier
checkpoint summaries, and a read-only, confined file reader.

`registry.schemas(enabled)` gives the OpenAI-format tool list a request carries (and the budget
counts); `registry.run_tool` runs one call and never raises: a failing tool is an error result
the model reads, not a failed turn.
"""
