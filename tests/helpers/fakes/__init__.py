"""Fake provider servers on 127.0.0.1 that tests script: OpenAI-compatible, Anthropic and
Ollama, on the HTTP plumbing they share (`http.py`). Their fixtures are in tests/conftest.py."""
