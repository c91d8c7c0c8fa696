"""`history_search` and `timeline_recall`: the model can still reach what compaction
summarized. The raw log is never rewritten, so the exact words are always there."""

from __future__ import annotations

from typing import Any, Mapping

from picochat.tools.base import Tool, ToolContext, int_arg, str_arg

SNIPPET_NOTE = "matches are between « and »"


READ_CHARS = 12_000
RECALL_CHARS = 8_000  # of one summary timeline_recall returns  # of one message read back by `seq`: a page, not the whole of a big file


def _history_search(args: Mapping[str, Any], ctx: ToolContext) -> str:
    if args.get("seq") is not None:
        return _read_back(args, ctx)
    query = str_arg(args, "query")
    limit = int_arg(args, "limit", 8, 1, 25)
    hits = ctx.store.search.messages(ctx.session_id, query, limit, ctx.before_seq)
    if not hits:
        shown = query if len(query) <= 200 else query[:200] + "…"  # never echo a flood back
        return f"No message of this conversation matches {shown!r}."
    lines = [f"{len(hits)} matching messages, best first ({SNIPPET_NOTE}):"]
    for h in hits:
        mark = " (undone by the user)" if h.retracted else ""
        lines.append(f"- #{h.seq} {h.role}{mark}: {' '.join(h.snippet.split())}")
    return "\n".join(lines)


def _read_back(args: Mapping[str, Any], ctx: ToolContext) -> str:
    """Message #seq in full, a page at a time: what a compacted context's pointer line
    ("history_search seq=14 reads it back") promises."""
    seq = int_arg(args, "seq", 0, 0, 2**62)
    offset = int_arg(args, "offset", 0, 0, 2**62)
    m = ctx.store.message(ctx.session_id, seq)
    if m is None or (ctx.before_seq is not None and seq >= ctx.before_seq):
        return f"No message #{seq} in the history of this conversation before this turn."
    text = m.content
    if m.tool_calls:
        names = ", ".join(str((c.get("function") or {}).get("name") or "?") for c in m.tool_calls)
        text = f"{text}\n[called: {names}]" if text else f"[called: {names}]"
    page = text[offset:offset + READ_CHARS]
    what = f"#{m.seq} {m.role}" + (f" {m.name}" if m.role == "tool" and m.name else "")
    mark = " (undone by the user)" if m.retracted else ""
    if offset == 0 and len(text) <= READ_CHARS:
        return f"{what}{mark}, {len(text):,} characters:\n{text}"
    end = offset + len(page)
    more = (f"; offset={end} reads on" if end < len(text) else "; the end")
    return (f"{what}{mark}, characters {min(offset, len(text)):,}–{end:,} of {len(text):,}"
            f"{more}:\n{page}")


def _timeline_recall(args: Mapping[str, Any], ctx: ToolContext) -> str:
    query = str_arg(args, "query")
    found = ctx.store.search.timeline(ctx.session_id, query, limit=3)
    if not found:
        return f"No earlier summary of this conversation mentions {query!r}."
    parts = [f"{len(found)} earlier checkpoint summaries mention it, best first:"]
    for key, content in found:
        text = content.strip()
        if len(text) > RECALL_CHARS:  # one result must never fill the context on its own
            text = (f"{text[: RECALL_CHARS // 2]}\n[… {len(text) - RECALL_CHARS:,} characters "
                    f"left out …]\n{text[-(RECALL_CHARS // 2):]}")
        parts.append(f"--- {key.removeprefix('context_checkpoint:')}\n{text}")
    return "\n\n".join(parts)


HISTORY_SEARCH = Tool(
    "history_search",
    "Search the full raw history of this conversation, including parts that were summarized "
    "out of your context. Returns message numbers, roles and matching passages; `seq` instead "
    "reads one message back whole.",
    {"type": "object", "properties": {
        "query": {"type": "string", "description": "words to look for"},
        "limit": {"type": "integer", "description": "at most this many results (1-25)",
                  "default": 8},
        "seq": {"type": "integer"},
        "offset": {"type": "integer", "description": "with seq: first character"}}},
    _history_search,
)

TIMELINE_RECALL = Tool(
    "timeline_recall",
    "Search the earlier checkpoint summaries of this conversation.",
    {"type": "object", "properties": {
        "query": {"type": "string", "description": "words to look for"}},
     "required": ["query"]},
    _timeline_recall,
)
