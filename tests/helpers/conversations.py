"""Sessions written as a chat would have written them: turns of filler, turns that plant facts,
long and short sessions, and the rows a session holds."""

from __future__ import annotations

import json
from tests.helpers.storage import append_message

FILLER = "The quick brown fox jumps over the lazy dog near port 8080. "


def talk(store, sid, turns, words=40, start=0):
    """`turns` user/assistant turns of roughly `words`*1.3 tokens per message."""
    seed(store, sid, turns, start, repeat=words // 12 + 1)


def plant_services(store, sid, turns=60):
    """`turns` turns, each a user message with three exact facts: more than a small window's
    ledger share holds."""
    for i in range(turns):
        append_message(store, sid, "user", f"Service {i} listens on port {8000 + i} with "
                       f"config /etc/svc/{i}.toml and ticket OPS-{1000 + i}.",
                       turn_id=f"t{i}")
        append_message(store, sid, "assistant", "Noted.", turn_id=f"t{i}")


def seed(store, sid: str, turns: int, start: int = 0, repeat: int = 6) -> None:
    """Earlier turns, as `ask` would have written them (~90 tokens a message)."""
    for i in range(start, start + turns):
        append_message(store, sid, "user", f"question {i}: " + FILLER * repeat, turn_id=f"t{i}")
        append_message(store, sid, "assistant", f"answer {i}: " + FILLER * repeat,
                       turn_id=f"t{i}")


def long_session(store, turns=16):
    """A session "t" of `turns` turns of some 80 tokens a message: more than a screen holds."""
    session = store.create_session("t")
    for i in range(turns):
        append_message(store, session.id, "user", f"q{i} " + "words " * 60, turn_id=f"x{i}")
        append_message(store, session.id, "assistant", f"a{i} " + "words " * 60,
                       turn_id=f"x{i}")
    return session


def short_turns(store, turns: int, user: str = "question {i}", answer: str = "answer {i}"):
    """A session "t" of `turns` short question-and-answer turns, written as they would be."""
    session = store.create_session("t")
    for i in range(turns):
        append_message(store, session.id, "user", user.format(i=i), turn_id=f"x{i}")
        append_message(store, session.id, "assistant", answer.format(i=i), turn_id=f"x{i}")
    return session


def rows_of(store, session_id) -> list[tuple[str, str, str]]:
    """The saved rows as (role, text, status)."""
    return [(m.role, m.content.strip(), m.status) for m in store.history(session_id)]


def file_text(name: str, lines: int = 120) -> str:
    return "\n".join(f"{name} line {i}: def handler_{i}(req): return process(req, mode={i})"
                     for i in range(lines))


def read_turn(store, sid: str, i: int, said: str, lines: int = 120, answer: str | None = None):
    """One turn in which the model read a file: user, call, result, answer."""
    call = {"id": f"c{i}", "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": f"mod{i}.py"})}}
    append_message(store, sid, "user", said, turn_id=f"t{i}")
    append_message(store, sid, "assistant", "", tool_calls=[call], turn_id=f"t{i}")
    append_message(store, sid, "tool", file_text(f"MARK{i}", lines), tool_call_id=f"c{i}",
                   name="read_file", tool_status="ok", turn_id=f"t{i}")
    append_message(store, sid, "assistant", answer or f"mod{i}.py defines 120 handlers.",
                   turn_id=f"t{i}")
