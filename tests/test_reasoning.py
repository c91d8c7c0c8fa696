"""Reasoning models through litellm against the fake OpenAI server: thinking is shown and never
saved or sent back, an answer cut at the output limit says so, and summary requests leave a
reasoning model room to think."""

from __future__ import annotations

import asyncio
import io
import json
import textwrap
from pathlib import Path

import pytest

from picochat import tokens
from picochat.cli.thinking import ThinkingLine
from picochat.compaction.transcript import reasoning_allowance, summary_budget
from picochat.config import load_config
from picochat.models import create_provider, resolve_model, supports_reasoning
from picochat.providers.base import TextDelta, ThinkingDelta
from picochat.session import SessionWorker, TurnFailed, TurnFinished
from picochat.storage.store import open_store
from picochat.tools.registry import schemas
from tests.helpers.fakes.openai import FakeOpenAI, summary_text
from tests.helpers.storage import append_message

ENV = {"FAKE_API_KEY": "test-key"}
THOUGHT = "The user asks for 2+2. Simple arithmetic: the sum is four."
FILLER = "The quick brown fox jumps over the lazy dog near port 8080. "


def config_text(api_base: str, model: str = "openai/fake-model", window: int = 8192) -> str:
    return textwrap.dedent(f'''\
        default_model = "fake"
        [models.fake]
        model = "{model}"
        api_base = "{api_base}"
        api_key_env = "FAKE_API_KEY"
        token_limit = {window}

        [context_compaction]
        reserve_tokens = 1024
        keep_recent_tokens = 800
    ''')


@pytest.fixture
def fake(fake_openai: FakeOpenAI, config_file: Path,
         monkeypatch: pytest.MonkeyPatch) -> FakeOpenAI:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(config_text(fake_openai.base_url), encoding="utf-8")
    return fake_openai


@pytest.fixture
def db_store(home: Path):
    """The database the CLI uses (PICOCHAT_DATA_DIR), opened in this process."""
    s = open_store(home / "data" / "picochat.db")
    yield s
    s.close()


def worker(store, sid: str, config_file: Path, model: str | None = None,
           tools: tuple = ()) -> SessionWorker:
    if model is not None:
        text = config_file.read_text(encoding="utf-8").replace("openai/fake-model", model)
        config_file.write_text(text, encoding="utf-8")
    config = load_config(config_file)
    resolved = resolve_model(config, "fake")
    return SessionWorker(store, sid, resolved, create_provider(resolved),
                         config.agent.system_prompt, compaction=config.context_compaction,
                         tools=tools)


async def turn(w: SessionWorker, text: str) -> tuple[list, TurnFinished | TurnFailed]:
    handle = w.submit_turn(text)
    events = [e async for e in handle]
    return events, await handle.result()


def shown(events, kind) -> str:
    return "".join(e.text for e in events if isinstance(e, kind))


def sent_back(body: dict) -> str:
    """Everything of the earlier conversation a request carries."""
    return json.dumps(body["messages"][:-1])


# --- thinking: shown, never saved, never sent back ----------------------------------------------


def test_reasoning_content_is_shown_as_thinking_and_only_the_answer_is_saved(fake, db_store,
                                                                           config_file):
    fake.script(("reasoning", THOUGHT, "It is 4."), ("text", "Fine."))
    s = db_store.create_session("s")

    async def run():
        async with worker(db_store, s.id, config_file) as w:
            first = await turn(w, "what is 2+2?")
            await turn(w, "thanks")
            return first

    events, outcome = asyncio.run(run())
    assert shown(events, ThinkingDelta) == THOUGHT
    assert shown(events, TextDelta) == "It is 4."
    assert isinstance(outcome, TurnFinished) and outcome.reply == "It is 4."
    assert [(m.role, m.content) for m in db_store.history(s.id)][:2] == [
        ("user", "what is 2+2?"), ("assistant", "It is 4.")]
    later = fake.requests[1]
    assert {"role": "assistant", "content": "It is 4."} in later["messages"]
    assert "arithmetic" not in sent_back(later)


def test_inline_think_split_across_chunks_is_neither_saved_nor_sent_back(fake, db_store,
                                                                         config_file):
    fake.script(("chunks", ["<thi", "nk>\nThe user gre", "ets me. Be brief.</th", "ink>",
                            "\n\nHel", "lo!"]), ("text", "Fine."))
    s = db_store.create_session("s")

    async def run():
        async with worker(db_store, s.id, config_file) as w:
            first = await turn(w, "hi")
            await turn(w, "and now?")
            return first

    events, outcome = asyncio.run(run())
    assert shown(events, ThinkingDelta) == "\nThe user greets me. Be brief."
    assert shown(events, TextDelta) == "Hello!"
    assert db_store.history(s.id)[1].content == "Hello!"
    assert "<think>" not in sent_back(fake.requests[1])
    assert "Be brief" not in sent_back(fake.requests[1])


def test_a_reply_whose_template_opened_the_block_loses_its_thinking_too(fake, db_store,
                                                                       config_file):
    # DeepSeek-R1 distills on vLLM: the prompt ends with "<think>\n", the reply with "</think>"
    fake.script(("chunks", ["Greeting; ", "answer kindly.\n</", "think>\n\nHi there!"]))
    s = db_store.create_session("s")

    async def run():
        async with worker(db_store, s.id, config_file,
                          model="openai/deepseek-r1-distill-qwen-7b") as w:
            return await turn(w, "hi")

    events, _ = asyncio.run(run())
    assert shown(events, ThinkingDelta) == "Greeting; answer kindly.\n"
    assert db_store.history(s.id)[1].content == "Hi there!"


def test_after_one_reply_closes_a_block_it_never_opened_the_next_start_inside(fake, db_store,
                                                                            config_file):
    fake.script(("chunks", ["Hm.</think>", "First."]),
                ("chunks", ["Think again.", "</think>\n", "Second."]))
    s = db_store.create_session("s")

    async def run():
        async with worker(db_store, s.id, config_file) as w:
            await turn(w, "one")
            return await turn(w, "two")

    events, _ = asyncio.run(run())
    assert shown(events, ThinkingDelta) == "Think again."
    assert db_store.history(s.id)[3].content == "Second."


# --- finish_reason "length" ---------------------------------------------------------------------


# --- the one provider that wants thinking back: DeepSeek, behind tool calls ---------------------

CALL_THOUGHT = "I should search the history for the port before I answer."
SEARCH = [("call_1", "history_search", json.dumps({"query": "port"}))]


PLAIN_THOUGHT = "A plain question about the host: no tool needed, localhost it is."


def tool_turns(db_store, config_file, model: str, later: int = 1) -> list:
    """The first turn thinks, calls history_search, then thinks again and answers; then the
    session is reopened (a new process would be) for `later` more turns."""
    s = db_store.create_session("s")

    async def run():
        async with worker(db_store, s.id, config_file, model,
                          tools=schemas(["history_search"])) as w:
            await turn(w, "which port did we pick?")
        async with worker(db_store, s.id, config_file, tools=schemas(["history_search"])) as w:
            for n in range(later):
                _, outcome = await turn(w, f"and the host? ({n})")
                assert isinstance(outcome, TurnFinished), outcome
        return outcome

    asyncio.run(run())
    return db_store.history(s.id)


def assistant_calls(body: dict) -> list[dict]:
    return [m for m in body["messages"] if m["role"] == "assistant" and m.get("tool_calls")]


def assistants(body: dict) -> list[dict]:
    return [m for m in body["messages"] if m["role"] == "assistant"]


def test_deepseek_gets_the_thinking_of_a_tool_turn_back_in_every_later_request(
        fake, db_store, config_file):
    fake.thinking_back = True  # as DeepSeek: a message without its thinking is a 400
    fake.script(("reasoning", CALL_THOUGHT, SEARCH), ("reasoning", THOUGHT, "Port 8080."),
                ("reasoning", PLAIN_THOUGHT, "localhost."), ("text", "Still localhost."))
    rows = tool_turns(db_store, config_file, "deepseek/deepseek-reasoner", later=2)
    assert len(fake.requests) == 4  # every request answered: none refused
    after_tool, next_turn, last = fake.requests[1:]
    for body in (after_tool, next_turn, last):  # the same turn, and later turns of a new worker
        [call] = assistant_calls(body)
        assert call["reasoning_content"] == CALL_THOUGHT
    # the answer that followed the tool results is part of that turn: its thinking goes too
    assert [m["reasoning_content"] for m in assistants(next_turn)] == [CALL_THOUGHT, THOUGHT]
    # a plain turn's thinking is not kept; DeepSeek ignores it, so it gets a bare placeholder
    assert [m["reasoning_content"] for m in assistants(last)] == [CALL_THOUGHT, THOUGHT, " "]
    assert "no tool needed" not in sent_back(last)
    assert [m.reasoning for m in rows if m.role == "assistant"] == [
        CALL_THOUGHT, THOUGHT, None, None]
    call_row = next(m for m in rows if m.tool_calls)
    # what is sent is counted: the row's tokens include its thinking
    assert call_row.tokens >= tokens.count_text(CALL_THOUGHT)


def test_a_session_switched_to_deepseek_is_not_refused_for_thinking_it_never_had(
        fake, db_store, config_file):
    """Tool calls made under another model have no thinking to send back: DeepSeek gets an
    empty one on each, not a history it refuses on every turn."""
    fake.script(("tool_calls", SEARCH), ("text", "Port 8080."), ("text", "localhost."))
    s = db_store.create_session("s")
    tools = schemas(["history_search"])

    async def run():
        async with worker(db_store, s.id, config_file, tools=tools) as w:
            await turn(w, "which port did we pick?")
        fake.thinking_back = True
        async with worker(db_store, s.id, config_file, "deepseek/deepseek-chat",
                          tools=tools) as w:
            return (await turn(w, "and the host?"))[1]

    outcome = asyncio.run(run())
    assert isinstance(outcome, TurnFinished), outcome
    assert outcome.reply == "localhost."
    assert [m["reasoning_content"] for m in assistants(fake.requests[-1])] == [" ", " "]


def test_a_tool_round_deepseek_did_not_think_in_still_gets_thinking_back(
        fake, db_store, config_file):
    """DeepSeek may call a tool without thinking first: that row has none to keep, and an
    empty `reasoning_content` it refuses as missing."""
    fake.thinking_back = True
    fake.script(("tool_calls", SEARCH), ("reasoning", THOUGHT, "Port 8080."), ("text", "ok"))
    rows = tool_turns(db_store, config_file, "deepseek/deepseek-reasoner")
    assert len(fake.requests) == 3  # none refused
    assert [m["reasoning_content"] for m in assistants(fake.requests[-1])] == [" ", THOUGHT]
    assert [m.reasoning for m in rows if m.role == "assistant"] == [None, THOUGHT, None]


def test_switching_away_from_deepseek_sends_no_thinking_to_the_next_model(
        fake, db_store, config_file):
    fake.script(("reasoning", CALL_THOUGHT, SEARCH), ("reasoning", THOUGHT, "Port 8080."),
                ("text", "localhost."))
    s = db_store.create_session("s")
    tools = schemas(["history_search"])

    async def run():
        async with worker(db_store, s.id, config_file, "deepseek/deepseek-reasoner",
                          tools=tools) as w:
            await turn(w, "which port did we pick?")
        text = config_file.read_text(encoding="utf-8")
        config_file.write_text(text.replace("deepseek/deepseek-reasoner", "openai/fake-model"),
                               encoding="utf-8")
        async with worker(db_store, s.id, config_file, tools=tools) as w:
            assert not w.provider.keeps_thinking  # the switch happened
            return (await turn(w, "and the host?"))[1]

    assert isinstance(asyncio.run(run()), TurnFinished)
    last = fake.requests[-1]
    assert assistant_calls(last), "the tool call itself is sent back"
    assert "reasoning_content" not in json.dumps(last["messages"])
    assert "search the history" not in sent_back(last) and "arithmetic" not in sent_back(last)


def test_no_other_provider_gets_thinking_back_nor_has_it_saved(fake, db_store, config_file):
    fake.script(("reasoning", CALL_THOUGHT, SEARCH), ("reasoning", THOUGHT, "Port 8080."),
                ("text", "localhost."))
    rows = tool_turns(db_store, config_file, "openai/fake-model")
    assert len(fake.requests) == 3
    for body in fake.requests[1:]:
        assert assistant_calls(body), "the tool call itself is sent back"
        assert "reasoning_content" not in json.dumps(body["messages"])
    assert all(m.reasoning is None for m in rows)


def test_deepseek_reached_as_an_openai_compatible_server_is_told_by_its_address():
    from picochat.providers.litellm_provider import wants_thinking_back
    assert wants_thinking_back("openai", "https://api.deepseek.com/v1")
    assert wants_thinking_back("deepseek", None)
    assert not wants_thinking_back("openai", None)
    assert not wants_thinking_back("openai", "http://127.0.0.1:8000/v1")


def test_an_answer_cut_at_the_output_limit_is_saved_and_marked_cut(fake, db_store, config_file):
    fake.script(("length", "The first half of a long"), ("text", "Done."))
    s = db_store.create_session("s")

    async def run():
        async with worker(db_store, s.id, config_file) as w:
            return (await turn(w, "write a lot"))[1], (await turn(w, "short now"))[1]

    cut, whole = asyncio.run(run())
    assert isinstance(cut, TurnFinished) and cut.cut and cut.finish == "length"
    assert db_store.history(s.id)[1].content == "The first half of a long"
    assert isinstance(whole, TurnFinished) and not whole.cut


def test_a_reply_cut_while_still_thinking_fails_with_that_reason(fake, db_store, config_file):
    fake.script(("length", ("chunks", ["<think>step one, step", " two, step three"])))
    s = db_store.create_session("s")

    async def run():
        async with worker(db_store, s.id, config_file) as w:
            return (await turn(w, "hard question"))[1]

    failed = asyncio.run(run())
    assert isinstance(failed, TurnFailed)
    assert "output limit while still thinking" in failed.error.user_line()
    assert failed.partial_seq is None  # the thinking is not kept as a partial answer
    assert [m.role for m in db_store.history(s.id)] == ["user"]


@pytest.mark.slow
def test_ask_says_cut_at_the_output_limit_on_stderr_and_exits_0(run_cli, fake):
    fake.script(("length", ("reasoning", THOUGHT, "A long answer that stops")))
    result = run_cli("ask", "write a lot", env=ENV)
    assert result.status == 0, result.stderr
    assert result.stdout == "A long answer that stops\n"  # stdout is the answer, no thinking
    [line] = result.stderr.splitlines()
    assert line.startswith("picochat: cut at the output limit: ")
    assert "continue" in line and "arithmetic" not in result.stderr  # no thinking on a pipe
    history = run_cli("history", "--json", env=ENV)
    assert [m["content"] for m in json.loads(history.stdout)["messages"]] == [
        "write a lot", "A long answer that stops"]
    fake.script(("reasoning", THOUGHT, "It is 4."))  # a whole answer: no line at all
    whole = run_cli("ask", "2+2?", env=ENV)
    assert (whole.status, whole.stdout, whole.stderr) == (0, "It is 4.\n", "")


def test_ask_json_prints_only_the_answer_and_the_cut_line(run_cli, fake):
    fake.script(("length", ("chunks", ["<think>plan</think>", "Par", "tial"])))
    result = run_cli("ask", "--json", "go", env=ENV)
    assert result.status == 0, result.stderr
    assert json.loads(result.stdout)["reply"] == "Partial"
    assert result.stderr.startswith("picochat: cut at the output limit")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_ask_tells_a_terminal_on_stderr_that_the_model_thinks_and_a_pipe_nothing():
    tty, pipe = Terminal(), io.StringIO()
    for stream in (tty, pipe):
        line = ThinkingLine(stream)
        line.thinking()
        line.thinking()  # once per stretch of thinking
        line.done()
        line.done()
    assert pipe.getvalue() == ""
    assert tty.getvalue().count("thinking…") == 1
    assert tty.getvalue().endswith("picochat: thought for <1 s\x1b[0m\n")


# --- summary requests to reasoning models -------------------------------------------------------


def seed(store, sid: str, turns: int) -> None:
    for i in range(turns):
        append_message(store, sid, "user", f"question {i}: " + FILLER * 6, turn_id=f"t{i}")
        append_message(store, sid, "assistant", f"answer {i}: " + FILLER * 6, turn_id=f"t{i}")


def test_the_map_and_local_names_tell_reasoning_models():
    assert supports_reasoning("deepseek/deepseek-reasoner")   # litellm's map says so
    assert supports_reasoning("openai/o3-mini")
    assert supports_reasoning("ollama/deepseek-r1:14b")        # a local one, by its name
    assert not supports_reasoning("openai/gpt-4o-mini")
    assert not supports_reasoning("openai/fake-model")


def test_reasoning_room_comes_from_the_transcripts_share_not_the_summarys():
    plain, thinking = summary_budget(8192, 300), summary_budget(8192, 300, reasoning=True)
    assert thinking.output_reserve == plain.output_reserve == 2048
    assert thinking.reasoning == reasoning_allowance(8192) == 1024
    assert thinking.source_budget == plain.source_budget - 1024
    assert reasoning_allowance(200_000) == 8192


@pytest.mark.parametrize("model, room", [("openai/fake-model", 0),
                                         ("deepseek/deepseek-reasoner", 1024)])
def test_a_summary_request_to_a_reasoning_model_leaves_room_to_think(fake, db_store, config_file,
                                                                    model, room):
    thinking = "I must list the ports first.\nPort 8080 appears often; keep it verbatim."
    s = db_store.create_session("s")
    seed(db_store, s.id, 10)

    async def run():
        async with worker(db_store, s.id, config_file, model=model) as w:
            cap = w.info().as_dict()["summary_cap_tokens"]  # the prose's share of the room
            # the room is for thinking: a summary that spends it on prose is still too long
            too_long = summary_text(1).replace("- fake summary 1",
                                               "- " + "many words " * (cap // 2 + 40))
            assert cap < tokens.count_text(too_long) < cap + 1024
            fake.script_summary(("reasoning", "Thinking.", too_long),
                                ("chunks", ["<think>", thinking, "</think>\n\n",
                                            summary_text(2)]))
            return cap, await w.compact(), await w.compact()

    cap, rejected, outcome = asyncio.run(run())
    assert [b["max_tokens"] for b in fake.summary_requests] == [cap + room] * 2
    assert not rejected.compacted and f"over its cap of {cap:,}" in rejected.error.user_line()
    assert outcome.compacted and not outcome.degraded, outcome.error
    summary = outcome.checkpoint.summary
    assert "I must list" not in summary and "<think>" not in summary
    assert "- fake summary 2" in summary
