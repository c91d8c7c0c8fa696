"""The first frame waits for nothing it does not show (issue 33): `picochat` draws the bar, the
prompt and the keys before it imports what only a send, a compaction, a command or another
screen needs (the fact ledger's regular expressions, compaction, a turn, the slash commands,
the dialogs, rendering for the CLI), and those stay unloaded while the app sits idle. The
engine itself (the store, the session worker, the model) opens after the first frame.

It runs in a fresh process: this one has imported all of them.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers.waiting import WAIT_S

# Loaded on first use, never for the first frame or an idle app.
ON_FIRST_USE = ["picochat.ledger", "picochat.statements", "picochat.fact_values",
                "picochat.render", "picochat.export", "picochat.prepare",
                "picochat.compaction.compact", "picochat.turn", "picochat.agent_loop",
                "picochat.tui.commands", "picochat.tui.screens", "picochat.tui.undo"]
# (tiktoken's encoding: tests/test_tui_idle_tokens.py; litellm's warm-up imports tiktoken.)
# Loaded as the session opens, in a thread, once the first frame is up.
AFTER_FIRST_FRAME = ["picochat.storage.store", "picochat.session", "picochat.catalog",
                     "picochat.models", "picochat.messages", "picochat.budget",
                     "picochat.compaction.report", "picochat.providers.base", "picochat.tokens"]

DRIVER = r"""
import asyncio, json, sys, threading, time

from textual.widgets._footer import FooterKey

from picochat.tui import app as tui_app

HEAVY, ENGINE = json.loads(sys.argv[1]), json.loads(sys.argv[2])
figures = {}
shown_first = tui_app.PicochatApp.on_mount
opening = tui_app.PicochatApp.opening.__func__
gate = threading.Event()  # the session opens once the first frame has been looked at

def held_opening(cls, open_chat, *args, **kwargs):
    def held():
        gate.wait(WAIT_S)  # an event; the bound only keeps a broken test from hanging
        return open_chat()
    return opening(cls, held, *args, **kwargs)

tui_app.PicochatApp.opening = classmethod(held_opening)

def on_mount(self):
    shown_first(self)

    def first_frame():
        figures["loaded_at_first_frame"] = [m for m in HEAVY if m in sys.modules]
        figures["engine_at_first_frame"] = [m for m in ENGINE if m in sys.modules]
        figures["keys_at_first_frame"] = [str(k.description) for k in self.query(FooterKey)]
        gate.set()
    self.call_after_refresh(first_frame)

tui_app.PicochatApp.on_mount = on_mount

async def drive(app):
    async with app.run_test(size=(110, 30)) as pilot:
        deadline = time.monotonic() + WAIT_S  # a failure bound, never a guess at a duration
        while not (app.ready and not any(w.group == "warm-up" and not w.is_finished
                                          for w in app.workers)):
            assert time.monotonic() < deadline, "never ready"
            await pilot.pause(0.02)
        figures["loaded_when_idle"] = [m for m in HEAVY if m in sys.modules]
        figures["engine_when_idle"] = [m for m in ENGINE if m in sys.modules]
        figures["keys_when_idle"] = [str(k.description) for k in app.query(FooterKey)]
        await app.run_command("/help")  # a command and its screen load when first used
        figures["loaded_by_a_command"] = sorted(
            m for m in ("picochat.tui.commands", "picochat.tui.screens") if m in sys.modules)
    print(json.dumps(figures))

tui_app.PicochatApp.run = lambda self: asyncio.run(drive(self))

from picochat.cli import commands
commands.has_terminal = lambda: True  # run_test's headless driver needs no terminal

from picochat.cli.main import main
sys.exit(main(["--model", "gpt-4o-mini"]))
"""


def test_the_first_frame_and_an_idle_app_load_only_what_they_show(home, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9")  # never called
    driver = f"WAIT_S = {WAIT_S!r}\n" + DRIVER
    proc = subprocess.run([sys.executable, "-c", driver, json.dumps(ON_FIRST_USE),
                           json.dumps(AFTER_FIRST_FRAME)],
                          capture_output=True, text=True, timeout=4 * WAIT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["loaded_at_first_frame"] == []
    assert figures["engine_at_first_frame"] == []
    assert figures["engine_when_idle"] == AFTER_FIRST_FRAME  # opened right after it
    assert figures["loaded_when_idle"] == []
    # the keys are in the first frame, the same as later (Textual's footer drew them a
    # frame or two later, behind the transcript)
    assert "Help" in figures["keys_at_first_frame"]
    assert figures["keys_at_first_frame"] == figures["keys_when_idle"]
    assert figures["loaded_by_a_command"] == ["picochat.tui.commands", "picochat.tui.screens"]
