"""Context compaction: plan a cut, summarize once, validate, commit atomically.

- `transcript`: the bounded, request-local copy of the history a summary call reads.
- `prompt`: the summary request itself: one call, no tools, the headings a summary must have.
- `compactor`: `ContextCompactor`, which plans and summarizes into a `CompactionCandidate`.
- `candidate`: the candidate and the checks it must pass before it may be committed.
- `pointers`: tier one, old tool results folded as pointer lines, with no summary call.
- `gate`: the quality check every summary passes before it may become a checkpoint.
- `degraded`: the deterministic whole-turn trim used only for overflow recovery.
- `trim_failure`: why no trim could bring a request under the window, in the user's words.
- `compact`: `compact_context`, the one entry point every trigger (manual, auto, overflow) shares.
- `report`: an outcome in the user's words, for the CLI and the app alike.
"""
