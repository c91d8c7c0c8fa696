"""Helpers shared by test files: fixtures live in conftest.py, everything else here, so no
test file imports another."""
