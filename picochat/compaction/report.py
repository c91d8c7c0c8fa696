"""A compaction's outcome in the user's words: the CLI prints these lines, the app shows them.
A summary is named as the user meets it in the app, "Summary 3 · auto · saved 1,412 tokens ·
covers messages 1–20": numbered from the first, ranges in message numbers, no ids."""

from __future__ import annotations

from typing import Any, Sequence

from picochat import tokens
from picochat.cutpoints import group_turns
from picochat.messages import Checkpoint

DEGRADED_NOTE = ("no summary could be written: the older turns were left out, "
                 "their exact facts kept")
POINTERS_NOTE = ("not a summary: the older turns are kept word for word, their tool results "
                 "as pointer lines (history_search reads them back)")


def numbers(checkpoints: Sequence[Checkpoint]) -> dict[str, int]:
    """Summary 1 is the first written; `checkpoints` come newest first (Store.checkpoints)."""
    return {cp.id: len(checkpoints) - i for i, cp in enumerate(checkpoints)}


def covered(cp: Checkpoint, cleared_at: int) -> str:
    """The messages a summary stands for: those before its raw tail, from the start or from
    the latest /clear (before a /clear, where it started is not known, so not claimed)."""
    last = cp.first_retained_seq - 1
    if not cleared_at:
        return f"messages 1–{last}"
    if cp.first_retained_seq > cleared_at:
        return f"messages {cleared_at + 1}–{last}"
    return f"messages up to {last}"


def headline(cp: Checkpoint, number: int, cleared_at: int) -> str:
    """"Summary 3 · auto · saved 1,412 tokens · covers messages 1–20"."""
    saved = cp.tokens_before - cp.tokens_after
    return (f"Summary {number} · {cp.trigger_reason} · saved {saved:,} tokens · "
            f"covers {covered(cp, cleared_at)}")


def dropped_note(outcome: Any, finder: str = "history_search") -> str | None:
    """"3 older exact facts dropped to fit; history_search finds them in the raw history", when
    a compaction had to evict facts from its ledger, and "1 pasted block kept as a pointer
    line" when it folded a paste: never silently."""
    pastes, n = getattr(outcome, "pastes_folded", 0), getattr(outcome, "facts_dropped", 0)
    tools = getattr(outcome, "tool_pointers", 0)
    parts = []
    if tools:
        parts.append(f"{tools:,} tool {'result' if tools == 1 else 'results'} kept as "
                     f"{'a pointer line' if tools == 1 else 'pointer lines'}"
                     + ("" if getattr(outcome, "summary_called", False) else ", no summary call"))
    if pastes:
        parts.append(f"{pastes:,} pasted {'block' if pastes == 1 else 'blocks'} kept as "
                     f"{'a pointer line' if pastes == 1 else 'pointer lines'}")
    if n:
        parts.append(f"{n:,} older exact {'fact' if n == 1 else 'facts'} dropped to fit")
    if not parts:
        return None
    return "; ".join(parts) + (f"; {finder} finds {'it' if pastes + n + tools == 1 else 'them'} "
                               "in the raw history")


def compacted_lines(outcome: Any) -> str:
    """The `/compact` success lines, with the new checkpoint row's own figures (the ones
    `/info` and `--json` show), never recomputed."""
    cp = outcome.checkpoint
    turns = outcome.kept_turns
    return (f"Context compacted: {cp.tokens_before:,} -> {cp.tokens_after:,} tokens\n"
            f"Kept {turns} recent turn{'s' if turns != 1 else ''} from message seq "
            f"{cp.first_retained_seq}\n"
            "Raw history unchanged")


def preview_rows(preview: Any) -> list[tuple[str, str]]:
    """A `CompactionPreview` as label and value rows (the app's preview, the CLI's lines)."""
    first, last, turns = preview.folded
    after = preview.tokens_after
    change = preview.changes
    facts = [f"{len(change.added):,} added", f"{change.carried:,} carried"]
    if change.gone:
        facts.append(f"{len(change.gone):,} no longer kept")
    if change.evicted:
        facts.append(f"{change.evicted:,} older dropped to fit (history_search finds them)")
    rows = [("Folds", f"messages {first}–{last} ({turns} turn{'s' if turns != 1 else ''})"
             if turns else "nothing new"),
            ("Keeps", f"messages {preview.first_kept} onward, as they are"),
            ("Tokens", f"{preview.tokens_before:,} → {after:,}" if after is not None
             else f"{preview.tokens_before:,} → (refused)"),
            ("Gate", preview.verdict_line),
            ("Facts", ", ".join(facts))]
    if preview.summary_error is not None:
        rows.append(("Note", f"no summary: {preview.summary_error.message}; the older turns "
                             "stay word for word, their tool results as pointer lines"))
    return rows


def fact_changes(preview: Any) -> list[str]:
    """`+ #12: …` for each fact the compaction adds, `- #3: …` for each it no longer keeps."""
    from picochat.ledger import row_line

    change = preview.changes
    return ([f"+ {row_line(r)}" for r in change.added]
            + [f"- {row_line(r)}" for r in change.gone])


def preview_text(preview: Any, session: str) -> str:
    """`picochat compact --preview`: the rows, the fact changes, then the summary."""
    lines = [f"Compaction preview of {session} (nothing written)"]
    lines += [f"{label + ':':8}{value}" for label, value in preview_rows(preview)]
    lines += fact_changes(preview)
    lines += ["", "Summary" + (" (refused, as written):" if not preview.committable else ":"),
              preview.summary]
    if not preview.committable:
        lines += ["", "A compaction now would keep the context as it is. In the app, "
                      "/compact --preview and e edit this summary (ctrl+r starts from "
                      "picochat's own extract); [context_compaction] summary_model hands "
                      "summaries to another model."]
    return "\n".join(lines)


FOLD_ALL = "/compact all"   # the app's way to fold what the kept tail holds; the CLI's: --all


def nothing_reason(outcome: Any, limits: Any, fold_all: str | None = FOLD_ALL) -> str:
    """Why `compact` found nothing to fold, in the user's terms. When the turns fit in the
    tail kept raw, it names `fold_all`, the command that folds them anyway; None when that
    was the command (it keeps only the newest turn, so it stops only where the others do)."""
    if getattr(outcome.summary_error, "kind", None) == "no_gain":
        return outcome.summary_error.message + "; they stay as they are"
    projection = outcome.projection
    turns = group_turns(projection.raw)
    if not turns:
        return "the context is empty"
    if len(turns) == 1:
        return "the context holds a single turn; there is nothing older to fold"
    if len(turns) == 2 and all(m.role == "user" for m in turns[-1].messages):
        return ("the context holds one answered turn and a message still unanswered; "
                "both stay raw, so there is nothing older to fold")
    where = "since the last checkpoint" if projection.summary is not None else "in the context"
    size = tokens.scale(projection.raw_tokens, limits.token_factor)
    fit = (f"the {len(turns)} turns {where} ({size:,} tokens) fit within "
           f"the {outcome.keep_tokens:,} tokens kept raw")
    if fold_all is None:
        return f"{fit}; nothing older than the newest turn to fold"
    return f"{fit}; use {fold_all} to fold all but the newest turn"


def compaction_note(outcome: Any, finder: str = "history_search") -> str | None:
    """One line about a compaction a turn ran first (auto or overflow), for stderr, or about
    why an automatic one waits; None when there was nothing to compact (the turn's own error
    then says why it failed). `finder`:
    what finds dropped facts where the line is read (the app's /search)."""
    cp = outcome.checkpoint
    if outcome.compacted:
        kind = ("degraded: older turns left out with their exact facts, no summary"
                if cp.degraded else f"{outcome.reason}, tool results as pointers"
                if cp.pointers else outcome.reason)
        turns = outcome.kept_turns
        line = (f"context compacted ({kind}): {cp.tokens_before:,} -> {cp.tokens_after:,} "
                f"tokens; kept {turns} turn{'s' if turns != 1 else ''} from seq "
                f"{cp.first_retained_seq}")
        if (cp.degraded or cp.pointers) and outcome.summary_error is not None:  # why none
            line += f"; no summary because {outcome.summary_error.user_line()}"
        if dropped := dropped_note(outcome, finder):
            line += f"; {dropped}"
        return line
    if outcome.deferred:
        return f"{outcome.reason} compaction waits: {outcome.deferred}"
    if outcome.error is not None:
        if outcome.reason == "overflow":
            return None  # the turn fails, and its error says why
        if outcome.error.kind == "stale_generation":  # history changed meanwhile: not retried
            return (f"{outcome.reason} compaction refused: {outcome.error.message}; "
                    "the next turn checks again")
        line = (f"{outcome.reason} compaction failed ({outcome.error.user_line()}); "
                "continuing with the context as it was")
        if outcome.waits_for:
            line += (f"; the next automatic try waits until the context has grown by "
                     f"{outcome.waits_for:,} tokens (/compact tries now)")
        return line
    return None
