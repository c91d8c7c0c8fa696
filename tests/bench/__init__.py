"""picochat's benchmarks: `python -m tests.bench` (see run.py). Figures, not assertions."""
