"""A message's derived data, computed once by its writer before the insert: its text made
valid UTF-8, its tool calls serialized, its token count and its ledger statements.

Not storage's job: the store inserts what it is given. Taken once, like the seq, so what a
message costs and says never changes after it is written, and storage stays free of token
counting and statement extraction. Writers call `prepare` on the store's thread
(`turn.append_new`), as the insert itself: a long message is never counted on the event loop.
"""

from __future__ import annotations

import json

from picochat import tokens
from picochat.messages import ROLES, Message, NewMessage, PreparedMessage, valid_text
from picochat.statements import statements_of, to_json


def prepare(new: NewMessage) -> PreparedMessage:
    """`new` ready to insert. A role that is not a message's raises ValueError: nothing of a
    batch holding it is written."""
    if new.role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {new.role!r}")
    calls, calls_json = None, None
    if new.tool_calls:  # serialized once; a lone surrogate in arguments is replaced too
        raw = json.dumps(new.tool_calls, ensure_ascii=False)
        calls_json = valid_text(raw)
        calls = json.loads(calls_json) if calls_json != raw else \
            [dict(c) for c in new.tool_calls]
    content = valid_text(new.content)
    reasoning = valid_text(new.reasoning) if new.reasoning else None
    count = new.token_count
    if count is None:
        count = tokens.count_message(new.role, content, calls, new.tool_call_id, new.name,
                                     reasoning)
    held = tuple(calls) if calls else None
    probe = Message("", 0, new.role, content, held, new.tool_call_id, new.name, new.turn_id,
                    new.tool_status, new.status, count, 0)
    return PreparedMessage(new.role, content, held, calls_json, new.tool_call_id, new.name,
                           new.turn_id, new.tool_status, new.status, count,
                           to_json(statements_of(probe)), reasoning)
