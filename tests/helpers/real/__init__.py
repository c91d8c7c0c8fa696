"""What the real-model tests (tests/real, `pytest -m real`) share: llama-cpp-python's server
with SmolLM2, a recording proxy in front of it, and picochat pointed at them."""
