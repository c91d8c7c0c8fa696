"""An app sitting idle holds no tokenizer (issue 33). When a message is coming, what counts it
loads with the modules a turn runs on: for a short message only the rank table (bpe, 5 MiB),
for a long one tiktoken's whole o200k encoding (~50 MiB, 0.35 s). The context's figures of an
idle app come from counts an earlier run kept beside the database, and they are the figures
counting gives once it can: never a guess.

Each run is a fresh process (`picochat` as a user starts it, on the headless driver), since
this one has loaded the encoding already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from picochat.storage import open_store
from picochat.token_counts import FILE_NAME
from tests.helpers.storage import append_message
from tests.helpers.waiting import WAIT_S

DRIVER = r"""
import asyncio, json, sys, time

from picochat import tokens
from picochat.tui import app as tui_app
from picochat.tui.status import StatusBar

PHASE = sys.argv[1]

async def until(pilot, holds, what):
    deadline = time.monotonic() + WAIT_S  # a failure bound, never a guess at a duration
    while not holds():
        assert time.monotonic() < deadline, what
        await pilot.pause(0.02)

def shown(app):
    bar = app.query_one(StatusBar)
    return {"used": bar.used, "threshold": bar.threshold,
            "counted": app.worker.info().budget.used_tokens
                       if tokens.loaded() or tokens.table_loaded() else None}

async def drive(app):
    out = {}
    async with app.run_test(size=(110, 30)) as pilot:
        await until(pilot, lambda: app.ready, "never ready")
        if PHASE == "long":  # a long message is coming: the whole encoding loads for it
            app.query_one("#prompt").load_text("word " * 4000)
            await until(pilot, tokens.loaded, "the encoding never loaded for a long message")
            out["long_loaded"] = tokens.loaded()
        elif PHASE == "first":  # a pin and a summary: every part of the figures but the tail
            await app.run_command("/pin the staging port is 8443")
            await app.run_command("/compact")
            await until(pilot, lambda: app.ready and app.worker.info().checkpoint is not None,
                        "never compacted")
            app.refresh_status()
            out["first"] = shown(app)
        else:
            # idle: the transcript and the figures are up, litellm's warm-up (the offline
            # model's) is done; what would have loaded the encoding has run
            await until(pilot, lambda: not any(w.group == "warm-up" and not w.is_finished
                                               for w in app.workers), "warm-up never ended")
            await pilot.pause()
            out["idle_loaded"] = tokens.loaded()
            out["idle_table"] = tokens.table_loaded()
            out["idle_tiktoken_imported"] = "tiktoken" in sys.modules
            out["idle_turn_imported"] = "picochat.turn" in sys.modules
            out["idle"] = shown(app)
            await pilot.press("h")  # a message is coming: what counts it loads meanwhile
            await until(pilot, lambda: tokens.table_loaded() and not app._loading_tokens,
                        "the rank table never loaded")
            out["typing_turn_imported"] = "picochat.turn" in sys.modules  # loaded before it
            out["typing_loaded"] = tokens.loaded()  # a short message needs no more
            out["typing_tiktoken_imported"] = "tiktoken" in sys.modules
            await until(pilot, lambda: app.ready, "never ready after the load")
            out["typing"] = shown(app)
            out["prompt"] = app.focused.text
    print(json.dumps(out))

tui_app.PicochatApp.run = lambda self: asyncio.run(drive(self))

from picochat.cli import commands
commands.has_terminal = lambda: True  # run_test's headless driver needs no terminal

from picochat.cli.main import main
sys.exit(main(["--session", "work"]))
"""


def run_app(phase: str) -> dict:
    driver = f"WAIT_S = {WAIT_S!r}\n" + DRIVER
    proc = subprocess.run([sys.executable, "-c", driver, phase], capture_output=True, text=True,
                          timeout=4 * WAIT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_an_idle_app_holds_no_encoding_and_its_figures_are_the_counted_ones(home: Path):
    (home / "config").mkdir()
    (home / "config" / "config.toml").write_text(
        'default_model = "offline"\n\n[context_compaction]\nkeep_recent_tokens = 300\n',
        encoding="utf-8")
    store = open_store(home / "data" / "picochat.db")
    session = store.create_session("work")
    for i in range(4):
        append_message(store, session.id, "user", f"Which port does service {i} use? "
                       + "Some context. " * 40, turn_id=f"t{i}")
        append_message(store, session.id, "assistant", f"Service {i} listens on {8000 + i}.",
                       turn_id=f"t{i}")
    store.close()

    first = run_app("first")["first"]  # counts the texts, and keeps their counts at quit
    assert (home / "data" / FILE_NAME).is_file()
    assert first["used"] == first["counted"] and first["used"] > 0

    second = run_app("second")
    assert second["idle_loaded"] is False and second["idle_tiktoken_imported"] is False
    assert second["idle_table"] is False
    # typing loads what the send will run on, so that Enter waits for neither; for a short
    # message that is the rank table, not tiktoken
    assert second["idle_turn_imported"] is False and second["typing_turn_imported"] is True
    assert second["typing_loaded"] is False and second["typing_tiktoken_imported"] is False
    # before the load, the figures are the counted ones (never an estimate), and they stay
    assert second["idle"] == {**first, "counted": None}
    assert second["typing"] == first
    assert second["prompt"] == "h"


def test_without_kept_counts_the_figures_wait_for_the_rank_table(home: Path):
    """A first start (nothing kept yet): the figures come once the texts are counted, and
    they are exact; short texts need the rank table only, not the whole encoding."""
    out = run_app("second")
    assert out["idle_table"] is True and out["idle_loaded"] is False  # the figures needed it
    assert out["idle"]["used"] == out["idle"]["counted"]


def test_a_long_message_coming_loads_the_whole_encoding(home: Path):
    assert run_app("long")["long_loaded"] is True
