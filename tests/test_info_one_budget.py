"""`picochat info` and the app's `/info` are one budget: the figures a user reads in the shell
are the ones the next `ask` (and the app) decide auto compaction by, to the token.

The session here has everything that can move the figure apart: its own `/system` prompt
(not the agent's), the built-in tools offered, and a window its server taught in an earlier
run (model_traits), smaller than the configured one."""

from __future__ import annotations

import pytest

import json

from picochat.config import load_config
from picochat.models import create_provider, resolve_model
from picochat.storage.store import open_store
from picochat.tui.app import PicochatApp
from picochat.tui.screens import CardScreen
from tests.helpers.tui import SIZE, say
from tests.helpers.waiting import settle
from tests.helpers.storage import append_message

CONFIG = """\
default_model = "small"

[models.small]
model = "offline"
token_limit = 16000
"""
LEARNED_WINDOW = 12_000
OWN_PROMPT = "You review infrastructure changes for the platform team. " * 120


def _session(home, config_file):
    """A session with its own prompt and some history, and a learned window for its model."""
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(CONFIG, encoding="utf-8")
    db = home / "data" / "picochat.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    store = open_store(db)
    session = store.create_session("own")
    for i in range(6):
        append_message(store, session.id, "user", f"question {i} " + "words " * 80,
                       turn_id=f"t{i}")
        append_message(store, session.id, "assistant", f"answer {i} " + "words " * 80,
                       turn_id=f"t{i}")
    store.set_session_system_prompt(session.id, OWN_PROMPT)
    store.traits.learn_window("offline", LEARNED_WINDOW, 16000)
    return store, store.session(session.id)


async def test_cli_info_and_the_apps_info_agree_to_the_token(home, config_file, run_cli):
    store, session = _session(home, config_file)
    try:
        result = run_cli("info", "--json", "--session", "own")
        assert result.status == 0, result.stderr
        cli = json.loads(result.stdout)

        config = load_config(config_file)
        model = resolve_model(config, "small")
        app = PicochatApp(store, session, model, create_provider(model), config)
        async with app.run_test(size=SIZE) as pilot:
            await say(pilot, "/info")
            await settle(pilot, app, lambda: isinstance(app.screen, CardScreen),
                         what="/info never opened its card")
            card = dict(app.screen.rows)
            shown = app.usage().as_dict()
    finally:
        store.close()

    # the situation is the one under test: own prompt, tools offered, learned window
    assert shown["effective_window_tokens"] == LEARNED_WINDOW
    assert shown["window_source"] == "learned" and shown["parts"]["tools"] > 0
    assert shown["parts"]["system"] > 1_000  # the session's prompt, not the agent's short one
    # and the shell says what the app says, to the token
    assert (cli["used_tokens"], cli["remaining_tokens"]) == \
        (shown["used_tokens"], shown["remaining_tokens"])
    assert cli == shown
    assert card["Used"].startswith(f"{cli['used_tokens']:,} ")
    assert card["Left before auto"] == f"{cli['remaining_tokens']:,}"


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_info_needs_no_key_for_the_model_it_measures(run_cli):
    """`info` names the model and measures, it never opens it: a hosted model whose key is
    not set still shows its figures (ask would refuse it)."""
    assert run_cli("ask", "--model", "offline", "--session", "k", "hi").status == 0
    result = run_cli("info", "--session", "k", "--model", "openai/gpt-4o-mini", "--json")
    assert result.status == 0, result.stderr
    card = json.loads(result.stdout)
    assert card["model"] == "openai/gpt-4o-mini" and card["offline"] is False
    assert card["raw_messages_in_context"] == 2
    refused = run_cli("ask", "--session", "k", "--model", "openai/gpt-4o-mini", "hi again")
    assert refused.status == 2 and "OPENAI_API_KEY" in refused.stderr
