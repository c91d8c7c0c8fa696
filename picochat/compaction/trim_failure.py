"""Why overflow recovery found no trim that fits, in one line that names the real cause.

The degraded trim (degraded.py) drops whole older turns, and the summary of the conversation
before them if need be; it always keeps the newest turn, and never touches the system prompt
or the tool schemas. When no trim fits, the parts of the request say why:

- picochat counts the request within the window. Then a server that refused it has a smaller
  real context than its error or the config says (a `ContextMisfit`); or, in the check before
  a turn, only the server's own count of the last request put it over: it counts more than
  picochat.
- it is over the window. The part to blame is the largest of: the newest turn (nothing can be
  dropped from it); the system prompt and tool schemas; the summary, when no older turn is left
  to drop with it. The line gives every figure, so the user can see it.

The message says what and where; the hint says what to do (a misfit's advice is in its message,
for callers that quote the message alone).
"""

from __future__ import annotations

from picochat import tokens
from picochat.budget import BudgetLimits, RequestParts
from picochat.cutpoints import Turn, group_turns
from picochat.errors import PicochatError
from picochat.projection import ContextProjection

LARGER_MODEL = "use a model with a larger window"


class TrimImpossible(PicochatError):
    """Overflow recovery found no whole-turn trim that fits the window."""

    kind = "context_overflow"


class ContextMisfit(TrimImpossible):
    """The provider refused a request that fits the window picochat knows: the window is
    wrong, and trimming history is not the remedy. The message holds the advice (no hint)."""


def trim_impossible(projection: ContextProjection, parts: RequestParts, limits: BudgetLimits,
                    refused: bool = True) -> TrimImpossible:
    """Why no trim of `projection` fits, truthfully. `parts` are the request's, in the model's
    tokens; `refused`: a server refused the request (overflow recovery), rather than the
    check before a turn finding it over the window."""
    window, total = limits.window, parts.total
    if total <= window:
        return _within(total, window, refused)
    turns = group_turns(projection.raw)
    newest = turns[-1] if turns else None
    alone = len(turns) <= 1  # a trim keeps the newest turn: nothing can be dropped
    turn = tokens.scale(newest.tokens, limits.token_factor) if newest else 0
    summary = parts.summary if alone else 0  # with an older turn to drop, it can go too
    name = _name(newest) if newest else "the newest turn"
    of_summary = ("the summary of the earlier conversation", summary)
    blame = max((("turn", turn), ("fixed", parts.fixed), ("summary", summary)),
                key=lambda part: part[1])[0]  # the first of equals
    if blame == "fixed":  # the system prompt and the tools apart: which to shorten
        items = [("the system prompt", parts.system), ("the tool schemas", parts.tools),
                 ("your pins", parts.pins), (name, turn), of_summary]
        tools = ", disable tools," if parts.tools else ","
        pins = " unpin a pin (/pins lists them)," if parts.pins else ""
        hint = f"shorten the system prompt{tools}{pins} or {LARGER_MODEL}"
    else:
        fixed = ("the system prompt, tools and pins" if parts.pins else
                 "the system prompt and tools", parts.fixed)
        if blame == "turn":
            items, hint = [(name, turn), of_summary, fixed], _turn_hint(newest)
        else:
            items = [of_summary, (name, turn), fixed]
            hint = ("/clear starts the context afresh and keeps the raw history; or "
                    f"{LARGER_MODEL}")
    drop = (", and there is no older turn to drop" if alone
            else " even with every older turn left out")
    return TrimImpossible(f"{_listed(items)}: together over the model's window of "
                          f"{window:,} tokens{drop}", hint)


def _listed(items: list[tuple[str, int]]) -> str:
    """'a is 5 tokens, b 3 and c 1': the parts of the request that count, largest blame first."""
    shown = [(what, n) for what, n in items if n]
    words = [f"{shown[0][0]} is {shown[0][1]:,} tokens"] + [f"{w} {n:,}" for w, n in shown[1:]]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _name(turn: Turn) -> str:
    """The newest turn as the user knows it: their message, or the messages by seq."""
    first, last = turn.messages[0], turn.messages[-1]
    if len(turn.messages) == 1:
        return f"your message #{first.seq}" if first.role == "user" else f"message #{first.seq}"
    return f"the newest turn's messages #{first.seq}–#{last.seq}"


def _turn_hint(turn: Turn | None) -> str:
    if turn is not None and len(turn.messages) == 1 and turn.messages[0].role == "user":
        return f"/clear, then send it shorter or in parts, or {LARGER_MODEL}"
    return f"/clear, or {LARGER_MODEL}"


def _within(total: int, window: int, refused: bool) -> TrimImpossible:
    """The request fits the window by picochat's count: trimming history is not the remedy."""
    counted = f"picochat counts about {total:,} tokens in the request, within the window of " \
              f"{window:,}"
    if not refused:  # the check before a turn went by the server's count of the last request
        return TrimImpossible(
            f"{counted}, but the server counted more for the last request than picochat does",
            "/clear, or set a lower token_limit for this model in the config so picochat "
            "compacts sooner")
    if total * 2 <= window:  # far under: no tokenizer is that different
        return ContextMisfit(
            f"{counted}: the server's real context must be smaller than its error or the "
            f"config says (llama.cpp's -c / n_ctx, or a per-slot context), or the prompt plus "
            f"max_tokens exceed it; set token_limit for this model in the config to the "
            f"server's real context, or raise the server's context")
    return ContextMisfit(
        f"{counted}: the server counts more tokens than picochat, or its real context is "
        f"smaller than its error or the config says; shorten the message, or raise the "
        f"server's context")
