"""Context compaction (design §9–§13): plan a cut, summarize once, validate, commit atomically.

- `transcript`: the bounded, request-local copy of the history a summary call reads (§10.3).
- `prompt`: the summary request itself (§10.1, §10.2).
- `compactor`: `ContextCompactor`, which plans and summarizes into a `CompactionCandidate`.
- `candidate`: the candidate and its §10.4 checks.
- `degraded`: the deterministic whole-turn trim used only for overflow recovery (§11.3).
- `compact`: `compact_context`, the one entry point every trigger shares (§7.4).
- `report`: an outcome in the user's words, for the CLI and the app alike.
"""
