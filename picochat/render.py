"""Plain-text, Markdown and JSON renderings of sessions, the raw log and checkpoints: the CLI
prints them, the app exports them."""

from __future__ import annotations

import json
import time
from typing import Any, Sequence

from picochat.ledger import counts, facts_line
from picochat.mdsafe import code_span, fence, plain
from picochat.messages import INTERRUPTED, Checkpoint, Message, Pin, Session


def when(ms: int | None) -> str:
    if not ms:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000))


def marks(message: Message, session: Session, checkpoint: Checkpoint | None) -> list[str]:
    """Why a raw message is not (or not verbatim) in the model's context."""
    out = []
    if message.seq <= session.context_floor_seq:
        out.append("cleared")
    elif checkpoint is not None and message.seq < checkpoint.first_retained_seq:
        out.append(f"left out by {checkpoint.id} (degraded)" if checkpoint.degraded
                   else f"summarized in {checkpoint.id}")
    if message.retracted:
        out.append("undone")
    if message.status == INTERRUPTED:
        out.append("interrupted")
    return out


def message_json(message: Message, session: Session, checkpoint: Checkpoint | None) -> dict[str, Any]:
    return {
        "seq": message.seq,
        "role": message.role,
        "content": message.content,
        "tool_calls": list(message.tool_calls) if message.tool_calls else None,
        "tool_call_id": message.tool_call_id,
        "name": message.name,
        "turn_id": message.turn_id,
        "tool_status": message.tool_status,
        "status": message.status,
        "tokens": message.tokens,
        "created_at": message.created_at,
        "marks": marks(message, session, checkpoint),
    }


def session_json(session: Session) -> dict[str, Any]:
    return {
        "id": session.id,
        "name": session.name,
        "model": session.model,
        "messages": session.message_count,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
        "active_context_checkpoint_id": session.active_context_checkpoint_id,
        "context_generation": session.context_generation,
        "context_floor_seq": session.context_floor_seq,
        "forked_from": session.forked_from,  # a fork: its source's id, and the last message
        "fork_seq": session.fork_seq if session.forked_from else None,  # of it it starts from
    }


def checkpoint_json(cp: Checkpoint, active_id: str | None, number: int = 0) -> dict[str, Any]:
    """A checkpoint for `--json`; `number`: "Summary N" as the app's panel numbers it."""
    out = dict(vars(cp))
    out["summary_number"] = number
    out["ledger"] = {"facts": [dict(vars(row)) for row in cp.ledger.rows],
                     "dropped": cp.ledger.dropped, "dropped_up_to": cp.ledger.dropped_up_to}
    out["active"] = cp.id == active_id
    facts = counts(cp.ledger)
    out["facts_kept"], out["facts_dropped"] = facts.kept, facts.dropped
    return out


def pin_json(pin: Pin) -> dict[str, Any]:
    return {"number": pin.number, "text": pin.text, "tokens": pin.tokens,
            "source_seq": pin.source_seq}


def sessions_table(sessions: list[Session]) -> str:
    if not sessions:
        return "No sessions yet. Start one with: picochat ask \"hello\""
    rows = [("NAME", "ID", "MESSAGES", "MODEL", "LAST ACTIVE")]
    rows += [(s.name, s.id, str(s.message_count), s.model or "(default)", when(s.updated_at))
             for s in sessions]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def history_text(session: Session, messages: list[Message], checkpoint: Checkpoint | None) -> str:
    if not messages:
        return f"Session {session.name} has no messages yet."
    out: list[str] = []
    for m in messages:
        label = [f"#{m.seq}", m.role, when(m.created_at)] + marks(m, session, checkpoint)
        out.append("── " + " · ".join(label))
        if m.role == "tool":
            out.append(f"[result of {m.tool_call_id}{' ' + m.name if m.name else ''}]")
        if m.content:
            out.append(m.content)
        for call in m.tool_calls or ():
            fn = call.get("function", {})
            out.append(f"[tool call {call.get('id')}] {fn.get('name')}({fn.get('arguments', '')})")
        out.append("")
    return "\n".join(out).rstrip()


def export_markdown(session: Session, messages: list[Message],
                    checkpoints: list[Checkpoint], pins: Sequence[Pin] = ()) -> str:
    """The session as Markdown: picochat's headings around what was said. Everything picochat
    did not write (messages, summaries, pins, names, ids) is fenced or escaped (`mdsafe`), so
    no content can make a heading, hide a real one, run as HTML or load an image."""
    active = next((c for c in checkpoints if c.id == session.active_context_checkpoint_id), None)
    lines = _md_title(session, len(messages), len(checkpoints))
    if pins:  # what every request carried, before the history
        lines += ["## Pins (sent word for word in every request)", ""]
        for pin in pins:
            source = f" (from #{pin.source_seq})" if pin.source_seq is not None else ""
            lines += [f"### Pin {pin.number}{source}", "", fence(pin.text), ""]
    for m in messages:
        lines += _md_message(m, session, active)
    if checkpoints:
        lines += ["# Checkpoints", ""]
        for cp in checkpoints:
            lines += _md_checkpoint(cp, active)
    return "\n".join(lines).rstrip() + "\n"


def _md_title(session: Session, messages: int, checkpoints: int) -> list[str]:
    """The name escaped: anyone who could run `ask --session` chose it."""
    return [f"# {plain(session.name)}", "",
            f"- session id: {code_span(session.id)}",
            f"- created: {when(session.created_at)}",
            f"- messages: {messages}",
            f"- checkpoints: {checkpoints}", ""]


def _md_message(m: Message, session: Session, active: Checkpoint | None) -> list[str]:
    """A message's heading, then its text fenced, then its tool calls. Ids and names (a model
    chose them) are inline code on one line: a backtick or a line break cannot end the line."""
    tag = marks(m, session, active)
    suffix = f" · _{', '.join(tag)}_" if tag else ""
    lines = [f"## #{m.seq} · {m.role} · {when(m.created_at)}{suffix}", ""]
    if m.role == "tool":
        name = f" ({code_span(m.name)})" if m.name else ""
        lines += [f"Result of {code_span(str(m.tool_call_id))}{name}:", "", fence(m.content)]
    elif m.content:
        lines.append(fence(m.content))
    for call in m.tool_calls or ():
        lines += ["", f"Tool call {code_span(str(call.get('id')))}:",
                  fence(json.dumps(call.get("function", {}), ensure_ascii=False, indent=2),
                        "json")]
    return lines + [""]


def _md_checkpoint(cp: Checkpoint, active: Checkpoint | None) -> list[str]:
    """A checkpoint's heading and numbers, then its summary fenced: a model wrote it."""
    state = "active" if active and cp.id == active.id else "inactive"
    return [f"## {cp.id} · generation {cp.generation} · {cp.trigger_reason} · {state}"
            + (" · degraded" if cp.degraded else ""), "",
            f"{cp.tokens_before:,} → {cp.tokens_after:,} tokens; raw tail from "
            f"seq {cp.first_retained_seq}; created {when(cp.created_at)}; "
            f"{facts_line(cp.ledger)}", "",
            fence(cp.summary), ""]


def export_json(session: Session, messages: list[Message], checkpoints: list[Checkpoint],
                pins: Sequence[Pin] = ()) -> str:
    active = next((c for c in checkpoints if c.id == session.active_context_checkpoint_id), None)
    return json.dumps({
        "session": session_json(session),
        "pins": [pin_json(p) for p in pins],
        "messages": [message_json(m, session, active) for m in messages],
        "checkpoints": [checkpoint_json(c, session.active_context_checkpoint_id)
                        for c in checkpoints],
    }, ensure_ascii=False, indent=2) + "\n"


def checkpoints_table(checkpoints: list[Checkpoint], active_id: str | None) -> str:
    """Newest first, each numbered "Summary N" as the app's checkpoint panel numbers it (the
    context generation is an internal counter: `--json` has it)."""
    from picochat.compaction.report import numbers

    if not checkpoints:
        return "No checkpoints yet: nothing has been compacted in this session."
    numbered = numbers(checkpoints)
    rows = [("", "SUMMARY", "ID", "REASON", "TOKENS", "FROM SEQ", "FACTS", "CREATED")]
    for cp in checkpoints:
        facts = counts(cp.ledger)
        rows.append(("*" if cp.id == active_id else "", str(numbered[cp.id]), cp.id,
                     cp.trigger_reason + (" (degraded)" if cp.degraded else ""),
                     f"{cp.tokens_before:,} -> {cp.tokens_after:,}", str(cp.first_retained_seq),
                     f"{facts.kept:,}" + (f" (-{facts.dropped:,})" if facts.dropped else ""),
                     when(cp.created_at)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    table = "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
    return table + "\n* active · FACTS: exact facts kept (-dropped to fit)"

