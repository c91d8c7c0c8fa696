"""Where the context goes (issue 34, item 4): `/context`'s parts are the budget's own, they add
up to the request the provider then receives (within what the server's own count corrects), the
bar gives every part its share of the window, and `/tools off` takes the tool schemas out of
every request for the session."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picochat.config import CompactionConfig, Config, ToolsConfig
from picochat.context_map import ContextMap, Part
from picochat.models import resolve_model
from picochat.session import SessionWorker
from picochat.storage import open_store
from picochat.tui.app import PicochatApp
from picochat.tui.context_view import ContextScreen
from tests.helpers.conversations import seed
from tests.helpers.scripted import Recorder, well_formed
from tests.helpers.storage import append_message
from tests.helpers.tui import chat_once, say
from tests.helpers.waiting import settle

WINDOW = 32_768


def config(tools: bool) -> Config:
    from picochat.config import ModelConfig

    return Config(models={"m": ModelConfig(name="m", model="offline", token_limit=WINDOW)},
                  context_compaction=CompactionConfig(keep_recent_tokens=300),
                  tools=ToolsConfig(enabled=("history_search", "timeline_recall")
                                    if tools else ()))


async def turn(worker, text):
    handle = worker.submit_turn(text)
    async for _ in handle:
        pass
    return await handle.result()


# --- the map -------------------------------------------------------------------------------------

def test_the_bar_gives_every_part_with_tokens_a_cell_and_fills_its_width():
    parts = (Part("system", "system prompt", 20), Part("tools", "tool schemas", 0),
             Part("summary", "summary", 3_000), Part("recent", "recent messages", 7),
             Part("reserve", "answer reserve", 4_096), Part("free", "free", 1_069))
    m = ContextMap(8_192, parts)
    for width in (6, 10, 40, 94):
        cells = m.cells(width)
        assert sum(n for _, n in cells) == max(width, 5)
        assert [k for k, _ in cells] == ["system", "summary", "recent", "reserve", "free"]
        assert all(n >= 1 for _, n in cells)
    wide = dict(m.cells(94))
    assert wide["reserve"] > wide["summary"] > wide["system"]  # in proportion


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(turns=st.integers(0, 12), pinned=st.booleans(), compacted=st.booleans(),
       tools=st.booleans(), scale=st.sampled_from([1.0, 1.15]))
def test_the_parts_add_up_to_the_request_the_provider_receives(turns, pinned, compacted, tools,
                                                                scale):
    """The map is drawn with the next message queued; the request that then carries it, as
    the provider counts it (its own tokenizer: `scale` o200k tokens each), is what the map's
    request parts said, within that calibration factor (what the server counted is its own
    figure; the newest messages are picochat's estimate until it counts them)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "m.db")
        try:
            sid = store.create_session("m").id
            seed(store, sid, turns)
            if pinned:
                store.add_pin(sid, "Our Redis runs on 6380.", 12)
            cfg = config(tools)
            provider = Recorder(summaries=[well_formed("Keep the services running.")],
                                usage_scale=scale)
            following = "What about the database host?"

            async def run():
                async with SessionWorker.from_config(store, sid, resolve_model(cfg, "m"),
                                                     provider, cfg) as worker:
                    if compacted:
                        await worker.compact(None, everything=True)
                    await turn(worker, "What port does Redis use?")  # the server counts once
                    drawn = worker.info().map_with([following])
                    await turn(worker, following)
                    return drawn

            drawn = asyncio.run(run())
            sent = provider.turn_requests[-1]
            received = int(_prompt(sent) * scale)  # what the server reports for it
            # the calibrated prefix is in the server's tokens, the tail in picochat's estimate:
            # the map lies between the two counts (exact when they agree), a rounding apart
            assert received / scale - 4 <= drawn.request <= received + 4, (
                drawn.rows(), received)
            reserve, free = drawn.part("reserve"), drawn.part("free")
            assert sum(p.tokens for p in drawn.parts) == WINDOW == (
                drawn.request + reserve.tokens + free.tokens)
            assert drawn.part("queued").tokens > 0
            assert (drawn.part("tools").tokens > 0) == tools
            assert (drawn.part("pins").tokens > 0) == pinned
        finally:
            store.close()


def _prompt(request) -> int:
    from picochat import tokens

    return tokens.count_provider_messages(request.messages)


def test_the_summary_is_split_into_its_prose_and_the_exact_facts(store):
    sid = store.create_session("f").id
    for i in range(10):
        append_message(store, sid, "user", f"Service {i} listens on port {8000 + i}. "
                       + "More words about it. " * 20, turn_id=f"t{i}")
        append_message(store, sid, "assistant", "Noted. " * 30, turn_id=f"t{i}")
    cfg = config(False)

    async def run():
        async with SessionWorker.from_config(store, sid, resolve_model(cfg, "m"),
                                             Recorder(summaries=[well_formed("Run them.")]),
                                             cfg) as worker:
            await worker.compact(None, everything=True)
            return worker.info()

    usage = asyncio.run(run())
    drawn = usage.map
    facts, prose = drawn.part("facts"), drawn.part("summary")
    assert facts.tokens > 0 and prose.tokens > 0
    assert facts.tokens + prose.tokens == usage.budget.parts.summary
    assert "listens on port" not in "".join(p.note for p in drawn.parts)  # figures, no text


# --- the headless figures ------------------------------------------------------------------------

def test_info_says_where_the_context_goes_and_json_gives_the_parts(run_cli, config_file):
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text('default_model = "m"\n[models.m]\nmodel = "offline"\n'
                           'token_limit = 8192\n')
    assert run_cli("ask", "-s", "w", "Our Redis runs on 6380.").status == 0
    text = run_cli("info", "-s", "w")
    assert text.status == 0
    [line] = [l for l in text.stdout.splitlines() if l.startswith("Where it goes")]
    assert "system prompt" in line and "tool schemas" in line and "free" in line
    card = json.loads(run_cli("info", "-s", "w", "--json").stdout)
    parts = {p["part"]: p["tokens"] for p in card["context_map"]}
    assert sum(parts.values()) == card["effective_window_tokens"]
    assert parts["reserve"] == card["reserve_tokens"]
    assert parts["free"] == card["remaining_tokens"]
    assert parts["tools"] == card["parts"]["tools"] > 0


# --- in the app ----------------------------------------------------------------------------------

def app_for(store, provider=None) -> PicochatApp:
    cfg = Config(context_compaction=CompactionConfig(keep_recent_tokens=300))
    session = store.create_session("ctx")
    seed(store, session.id, 4)
    return PicochatApp(store, session, resolve_model(cfg, "offline"), provider or Recorder(),
                       cfg)


async def test_slash_context_draws_the_bar_and_the_table(store):
    app = app_for(store)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await app.run_command("/context")
        await settle(pilot, app, lambda: isinstance(app.screen, ContextScreen)
                     and bool(app.screen.query("#ctx-bar")))
        await pilot.pause()
        drawn = app.screen.context
        assert drawn.request == app.worker.info().budget.used_tokens
        bar = str(app.screen.query_one("#ctx-bar").render())
        assert "▓" in bar and "░" in bar and "█" in bar
        await pilot.press("escape")
        await settle(pilot, app, lambda: not isinstance(app.screen, ContextScreen))


async def test_tools_off_takes_the_schemas_out_of_every_request_for_the_session(store):
    provider = Recorder()
    app = app_for(store, provider)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, lambda: app.ready)
        with_tools = app.worker.info().map.part("tools").tokens
        assert with_tools > 0
        await app.run_command("/tools off")
        await settle(pilot, app, lambda: app.worker.tools_off)
        assert app.worker.info().map.part("tools").tokens == 0
        assert "off for this session" in app.worker.info().map.part("tools").note
        await chat_once(pilot, app, store, "hello")
        assert provider.turn_requests[-1].tools == ()
        await app.run_command("/tools on")
        await settle(pilot, app, lambda: not app.worker.tools_off)
        await say(pilot, "again")
        await settle(pilot, app, lambda: len(provider.turn_requests) == 2)
        assert provider.turn_requests[-1].tools != ()
