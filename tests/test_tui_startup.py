"""The first frame never waits for litellm: `picochat` with a real model shows its screen,
focuses the prompt and takes typing while litellm's import (made to hang here) has not ended.

It runs in a fresh process, since this one may have imported litellm already.
"""

from __future__ import annotations

import pytest

import json
import subprocess
import sys

from tests.helpers.waiting import WAIT_S

DRIVER = r"""
import asyncio, json, sys, threading, time

from picochat.providers import litellm_provider
from picochat.tui import app as tui_app

gate = threading.Event()
real_import = litellm_provider.import_litellm

def held_import():  # litellm's import, held until the first frame has been checked
    gate.wait(WAIT_S)  # an event; the bound only keeps a broken test from hanging
    return real_import()

litellm_provider.import_litellm = held_import

async def drive(app):
    figures = {}
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        figures["litellm_at_first_frame"] = "litellm" in sys.modules
        figures["focused"] = type(app.focused).__name__
        figures["screen_has_model"] = "gpt-4o-mini" in app.export_screenshot()
        await pilot.press(*"typed at once")
        figures["prompt"] = app.focused.text
        gate.set()
        # litellm's import (seconds, many more on a busy machine) ends: looked at between
        # pauses, since the app offers no event for it; the deadline is a failure bound
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if "litellm" in sys.modules and not any(
                    w.group == "warm-up" and not w.is_finished for w in app.workers):
                break
            await pilot.pause(0.05)
        figures["litellm_after_warm_up"] = "litellm" in sys.modules
    print(json.dumps(figures))

tui_app.PicochatApp.run = lambda self: asyncio.run(drive(self))

from picochat.cli import commands
commands.has_terminal = lambda: True  # run_test's headless driver needs no terminal; a pipe does

from picochat.cli.main import main
sys.exit(main(["--model", "gpt-4o-mini"]))
"""


@pytest.mark.slow
def test_first_frame_and_typing_do_not_wait_for_litellm(home, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9")  # never called
    # a failure bound: the process starts Python, then litellm's import may take WAIT_S
    driver = f"WAIT_S = {WAIT_S!r}\n" + DRIVER
    proc = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True,
                          timeout=4 * WAIT_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures == {
        "litellm_at_first_frame": False,
        "focused": "Prompt",
        "screen_has_model": True,
        "prompt": "typed at once",
        "litellm_after_warm_up": True,
    }
