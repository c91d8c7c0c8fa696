"""`history_search` and `timeline_recall`: the model can still reach what compaction
summarized. The raw log is never rewritten, so the exact words are always there."""

from __future__ import annotations

from typing import Any, Mapping

from picochat.tools.base import Tool, ToolContext, int_arg, str_arg

SNIPPET_NOTE = "matches are between « and »"


def _history_search(args: Mapping[str, Any], ctx: ToolContext) -> str:
    query = str_arg(args, "query")
    limit = int_arg(args, "limit", 8, 1, 25)
    hits = ctx.store.search_messages(ctx.session_id, query, limit, ctx.before_seq)
    if not hits:
        return f"No message of this conversation matches {query!r}."
    lines = [f"{len(hits)} matching messages, best first ({SNIPPET_NOTE}):"]
    for h in hits:
        mark = " (undone by the user)" if h.retracted else ""
        lines.append(f"- #{h.seq} {h.role}{mark}: {' '.join(h.snippet.split())}")
    return "\n".join(lines)


def _timeline_recall(args: Mapping[str, Any], ctx: ToolContext) -> str:
    query = str_arg(args, "query")
    found = ctx.store.search_timeline(ctx.session_id, query, limit=3)
    if not found:
        return f"No earlier summary of this conversation mentions {query!r}."
    parts = [f"{len(found)} earlier checkpoint summaries mention it, best first:"]
    for key, content in found:
        parts.append(f"--- {key.removeprefix('context_checkpoint:')}\n{content.strip()}")
    return "\n\n".join(parts)


HISTORY_SEARCH = Tool(
    "history_search",
    "Search the full raw history of this conversation, including parts that were summarized "
    "out of your context. Returns message numbers, roles and matching passages.",
    {"type": "object", "properties": {
        "query": {"type": "string", "description": "words to look for"},
        "limit": {"type": "integer", "description": "at most this many results (1-25)",
                  "default": 8}},
     "required": ["query"]},
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
