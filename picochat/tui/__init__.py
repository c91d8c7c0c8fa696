"""The Textual app. It drives the same SessionWorker as the CLI and holds no business logic:
the engine decides, the widgets show. Nothing here writes SQL."""
