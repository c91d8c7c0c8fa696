"""The slash commands: what each one does in the host, and the table that names them.

`slash` holds their names, arguments and help (pure, for the hints, F1 and the palette); this
module holds their handlers, one function per command, and `HANDLERS`, the table the host
dispatches through. A handler gets the host and the text after the command's name.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
import asyncio
from typing import Awaitable, Callable

from picochat.budget import pin_cap
from picochat.compaction import report
from picochat.errors import PicochatError
from picochat.export import FORMATS, write_record
from picochat.fsutil import check_export_target
from picochat.failures import compaction_failure_line
from picochat.opening import open_model
from picochat.pins import pin_label, pins_stay
from picochat.tui import slash, status, undo
from picochat.tui.host import CommandHost
from picochat.tui.copyable import copy_shown
from picochat.tui.pending import Pending
from picochat.tui.safe import literal
from picochat.tui.screens import ConfirmScreen, PickScreen

Handler = Callable[[CommandHost, str], Awaitable[None]]


PREVIEW_FLAG = "--preview"


async def cmd_compact(host: CommandHost, focus: str) -> None:
    """`/compact [focus]`; `/compact all` folds all but the newest turn; `/compact --preview
    [focus|all]` shows the compaction before anything is written."""
    chat = host.chat
    words = focus.split()
    preview = bool(words) and words[0].lower() == PREVIEW_FLAG
    if preview:
        focus = focus.strip()[len(PREVIEW_FLAG):].strip()
    if host.worker.busy:
        await chat.add_notice(f"/compact{' --preview' if preview else ''} is queued: it runs "
                              "when the current answer ends")
    everything = focus.strip().lower() == "all"
    host.run_worker(_compact(host, None if everything else (focus or None), everything,
                             preview), group="commands", exit_on_error=False)


async def _compact(host: CommandHost, focus: str | None, everything: bool,
                   preview: bool = False) -> None:
    chat = host.chat
    line = Pending("writing a summary to preview" if preview else "compacting the context",
                   stop="")

    conversation = host.conversation

    def started() -> None:  # when the turns queued before it have ended
        conversation.set_activity(status.COMPACTING)  # Esc does not stop a /compact
        chat.put(line)

    try:
        if preview:
            got = await host.worker.preview(focus, everything=everything, on_start=started)
        else:
            got = await host.worker.compact(focus, everything=everything, on_start=started)
    finally:
        conversation.set_activity("")
        chat.take(line)  # not awaited: the outcome's line must be shown before anything a
        #                  job queued behind this one (a /clear) says
    from picochat.compaction.preview import CompactionPreview

    if isinstance(got, CompactionPreview):
        outcome = await review(host, got)
        if outcome is None:
            return
    else:
        outcome = got
    await show_outcome(host, outcome, everything)


async def review(host: CommandHost, preview):
    """`/compact --preview`: the outcome of the preview the user committed (queued, as
    /compact is), or None when they dropped it (a line says nothing was written)."""
    picked = await choose(host, preview)
    if picked is None:
        await host.worker.drop_preview(preview)
        await host.chat.add_notice("Preview dropped: nothing was written")
        return None
    return await host.worker.commit_preview(picked)


async def choose(host: CommandHost, preview, title: str = "Compaction preview"):
    """Show `preview` until the user picks: the preview to commit (the one shown, or their
    edit of it), or None to drop it. Also the reviewer of automatic compactions, with
    `[context_compaction] preview` on."""
    from picochat.tui.compaction_preview import PreviewScreen

    chosen: asyncio.Future = asyncio.get_running_loop().create_future()
    host.push_screen(PreviewScreen(preview, title), chosen.set_result)
    return await chosen


async def show_outcome(host: CommandHost, outcome, everything: bool = False) -> None:
    """A /compact's outcome in the transcript: the card, the failure line, or why not."""
    chat, conversation = host.chat, host.conversation
    if outcome.compacted:
        await chat.add_notice(compacted_card(outcome), "card")
        await conversation.compacted(outcome, announce=False)
    elif outcome.error is not None:
        await chat.add_notice(compaction_failure_line(outcome.error), "error")
        await host.refresh_panel()  # a refused summary shows there, with its reason
    else:
        reason = report.nothing_reason(outcome, host.worker.limits,
                                       None if everything else report.FOLD_ALL)
        await chat.add_notice(f"Nothing to compact: {reason}")


def compacted_card(outcome) -> str:
    """/compact's success in the reader's words (the shell's lines are the contract's,
    DESIGN.md D11.1 and contract "Command line": report.compacted_lines); the figures are the
    new checkpoint row's own."""
    cp = outcome.checkpoint
    first = cp.first_retained_seq
    how = ("older turns left out, their exact facts kept (no summary could be written)"
           if cp.degraded else f"the messages before {first} word for word, their tool "
           "results as pointer lines (not a summary)"
           if cp.pointers else f"a summary of the messages before {first}")
    dropped = report.dropped_note(outcome, "/search")
    return (f"Context compacted: {cp.tokens_before:,} → {cp.tokens_after:,} tokens\n"
            f"The model now reads {how}, then messages {first} onward as they are\n"
            + (f"{dropped[0].upper()}{dropped[1:]}\n" if dropped else "")
            + "The history is unchanged: F2 shows the summary")


async def cmd_uncompact(host: CommandHost, _: str) -> None:
    result = await host.worker.uncompact()
    chat = host.chat
    if result.uncleared:
        await chat.add_notice("Undid the /clear: the model reads the context from before it "
                              "again" + (", with its summary" if result.active else "")
                              + "; messages sent since stay after it")
    elif result.undone:
        now = await host.worker.active_checkpoint()
        reads = (f"the earlier summary and messages {now.first_retained_seq} onward as they "
                 "are" if now else "the whole conversation as it is, with no summary")
        await chat.add_notice(f"Undid the last compaction: the model now reads {reads}")
    else:
        await chat.add_notice("Nothing to uncompact: no summary is in use, and no /clear to "
                              "take back")
    await host.context_moved()


async def cmd_info(host: CommandHost, _: str) -> None:
    host.action_info()


async def cmd_context(host: CommandHost, _: str) -> None:
    """`/context`: the stacked bar of where the window goes, and its table."""
    from picochat.tui.context_view import ContextScreen

    usage = host.usage()
    queued = [q.handle.text for q in host.conversation.queued if not q.handle.started]
    context = usage.map_with(queued)
    lim = usage.budget.limits
    host.push_screen(ContextScreen(context, f"Context (/context) · {context.request:,} of "
                                            f"{lim.window:,} tokens · auto-compact at "
                                            f"{lim.threshold:,}"))


async def cmd_tools(host: CommandHost, arg: str) -> None:
    """`/tools`: what is offered; `/tools off` drops the schemas for this session, `/tools
    on` brings them back."""
    chat, worker = host.chat, host.worker
    word = arg.strip().lower()
    if word not in ("", "on", "off"):
        await chat.add_notice(f"/tools takes on or off, not {arg.strip()!r}", "error")
        return
    if word:
        cost = await worker.set_tools(word == "on")
        said = (f"Tools offered again: {cost:,} tokens of every request" if word == "on" else
                f"Tools off for this session: {cost:,} tokens freed in every request; "
                "/tools on offers them again")
        await chat.add_notice(said)
        host.refresh_status()
        return
    await chat.add_notice(f"Tools: {worker.tools_line()}")


async def cmd_reload(host: CommandHost, _: str) -> None:
    """`/reload`: read the config file again and apply what changed."""
    await reload_config(host)


async def reload_config(host: CommandHost, saved: bool = False) -> None:
    """The config file read again, and what changed applied: the session reopens with it (its
    model, summary model, compaction and tools), and each changed key is said. A file that
    does not load changes nothing. `saved`: the app saw the file change (an editor in another
    pane) and applies it unasked, once nothing runs; a save that changes nothing says nothing."""
    from picochat.config import config_changes, load_config

    chat = host.chat
    if host.paths is None:
        await chat.add_notice("Nothing to reload: this app was started without a config file")
        return
    if host.worker.busy:
        await chat.add_notice("Not reloaded: a turn is running; /reload once it ends",
                              "error")
        return
    path = host.paths.config_file
    try:
        new = await asyncio.to_thread(load_config, path)
    except PicochatError as exc:
        host.config_loaded()  # said once: the next save is a new change
        said = ("The config file was saved but does not load; the config in use stays "
                "until it does: " if saved else "Not reloaded, the config in use stays: ")
        await chat.add_notice(said + exc.user_line(), "error")
        return
    changes = config_changes(host.config, new)
    host.config_loaded()
    if not changes:
        if not saved:
            await chat.add_notice(f"{path} has not changed: nothing to apply")
        return
    host.config = new
    await host.open_session(await host.sessions.get(host.session.id))
    if new.ui.theme != host.theme and new.ui.theme in host.theme_names:
        host.set_theme(new.ui.theme)
    shown = changes[:8] + ([f"… and {len(changes) - 8} more"] if len(changes) > 8 else [])
    said = f"{path} was saved; applied" if saved else f"Reloaded {path}"
    await chat.add_notice(f"{said}:\n" + "\n".join(shown))


async def cmd_checkpoints(host: CommandHost, _: str) -> None:
    host.action_checkpoints()


async def cmd_clear(host: CommandHost, _: str) -> None:
    await host.worker.clear()
    await host.chat.add_notice(
        "Context cleared: the model starts afresh; the raw history above stays"
        + pins_stay(len(host.worker.pins())) + ". /uncompact brings the context back")
    await host.context_moved()


async def cmd_pin(host: CommandHost, text: str) -> None:
    """`/pin TEXT`; without text, what /pins shows and how to pin."""
    if not text.strip():
        await cmd_pins(host, "")
        return
    await pin(host, text=text)


async def pin(host: CommandHost, text: str | None = None, seq: int | None = None) -> None:
    """Pin typed text or a saved message (alt+p on a selected one), and say what it costs."""
    chat = host.chat
    if host.worker.busy:
        await chat.add_notice("/pin is queued: it applies from the next request")
    try:
        made = await host.worker.pin(text, seq)
    except PicochatError as exc:
        await chat.add_notice(exc.user_line(), "error")
        return
    source = f"Message {seq} pinned" if seq is not None else "Pinned"
    await chat.add_notice(f"{source} as #{made.number} ({made.tokens:,} tokens): the model "
                          "reads it word for word in every request, before any summary; "
                          f"/unpin {made.number} removes it")
    await host.refresh_panel()
    host.refresh_status()


async def cmd_pins(host: CommandHost, _: str) -> None:
    usage = host.usage()
    pins = usage.projection.pins
    if not pins:
        await host.chat.add_notice(
            "No pins: /pin TEXT, or select a message (alt+↑) and press alt+p, keeps a statement "
            "word for word in every request")
        return
    lines = [f"Pins: {usage.budget.parts.pins:,} tokens of every request (cap "
             f"{pin_cap(usage.budget.limits):,}); /unpin N removes one"]
    lines += [pin_label(p) for p in pins]
    await host.chat.add_notice("\n".join(lines))


async def cmd_unpin(host: CommandHost, arg: str) -> None:
    chat = host.chat
    number = arg.strip().lstrip("#")
    if not (number.isascii() and number.isdigit()):
        await chat.add_notice("/unpin needs a pin's number: /unpin N (/pins lists them)",
                              "error")
        return
    try:
        gone = await host.worker.unpin(int(number))
    except PicochatError as exc:
        await chat.add_notice(exc.user_line(), "error")
        return
    await chat.add_notice(f"Unpinned {pin_label(gone)}: the next request no longer carries it")
    await host.refresh_panel()
    host.refresh_status()


async def cmd_stop(host: CommandHost, _: str) -> None:
    if not host.conversation.stop():
        await host.chat.add_notice("Nothing to stop: no answer is running")


async def cmd_undo(host: CommandHost, _: str) -> None:
    """`/undo`: take back the newest turn in the context; one this window never showed
    (another picochat wrote it) only once the user has seen what it is and said yes."""
    turn, shown = await undo.newest_turn(host)
    if turn is None:
        await host.chat.add_notice("Nothing to undo: no turn is in the context")
        return
    await undo.after_asking(host, shown, undo.unseen_question(
        turn, "Take back a turn this window never showed?",
        "The model would no longer read it; it stays in the history."),
        lambda: undo.undo_turn(host, turn, shown))


async def cmd_retry(host: CommandHost, _: str) -> None:
    """`/retry`: take back the newest turn in the context and ask its question again. After
    /clear there is none: the question from before the clear is not the model's to answer."""
    chat = host.chat
    if host.worker.busy:
        await chat.add_notice("An answer is still running: /stop it first", "error")
        return
    turn, shown = await undo.newest_turn(host)
    if turn is None or turn.question is None:
        await chat.add_notice("Nothing to retry: no question of yours is in the context")
        return
    question = turn.question

    async def retry() -> None:
        if await undo.undo_turn(host, turn, shown):
            host.conversation.run_turn(question)
    await undo.after_asking(host, shown, undo.unseen_question(
        turn, "Ask again a question this window never showed?",
        "Its turn is taken back and the question sent again."), retry)


async def cmd_new(host: CommandHost, name: str) -> None:
    if name and await host.sessions.find(name):
        await host.chat.add_notice(
            f"a session named {name!r} exists; /sessions switches to it", "error")
        return
    try:
        session = await host.sessions.create(name or None)
    except PicochatError as exc:
        await host.chat.add_notice(exc.user_line(), "error")
        return
    await host.open_session(session)


async def cmd_sessions(host: CommandHost, _: str) -> None:
    """`/sessions`: the picker, filtered as the user types."""
    from picochat.models import model_name_without_probing
    from picochat.tui.session_picker import Row, SessionPicker

    # a session with no model of its own opens with the default, as this one did unless
    # it has its own: auto-detected defaults have no name in the config
    default = "" if host.session.model else host.worker.model.name
    listing = await host.sessions.listing()
    names = {s.id: s.name for s, _ in listing}
    rows = [Row(s, first, model_name_without_probing(host.config, s.model) or default,
                names.get(s.forked_from, "a deleted session") if s.forked_from else "")
            for s, first in listing]

    async def picked(session_id: str | None) -> None:
        if session_id and session_id != host.session.id:
            await host.open_session(await host.sessions.get(session_id))
    host.push_screen(SessionPicker(rows, host.session.id), picked)


async def cmd_branches(host: CommandHost, _: str) -> None:
    """`/branches` (ctrl+b): the picker; with one branch, how to start another."""
    from picochat.tui.branch_picker import BranchPicker

    branches = await host.worker.branches()
    if len(branches) < 2:
        await host.chat.add_notice("One branch so far: select an earlier message of yours "
                                   "(alt+↑, then ↑) and press e to edit it; sending it starts "
                                   "a new branch there, and this one is kept")
        return

    async def picked(branch: int | None) -> None:
        if branch is not None and branch != host.session.branch:
            await host.switch_branch(branch)
    host.push_screen(BranchPicker(branches), picked)


async def cmd_fork(host: CommandHost, name: str) -> None:
    """`/fork [NAME]`: a new session from this one's context, once the work queued before
    it is done, then opened; this one stays as it is."""
    from picochat.session import fork_said

    if host.worker.busy:
        await host.chat.add_notice("/fork is queued: it forks once the current answer ends, "
                                   "with that answer")
    try:
        done = await host.worker.fork(name or None)
    except PicochatError as exc:
        await host.chat.add_notice(exc.user_line(), "error")
        return
    await host.open_session(done.session)
    await host.chat.add_notice(f"{fork_said(done)}. /sessions switches back.")


async def cmd_rename(host: CommandHost, name: str) -> None:
    chat = host.chat
    if not name:
        await chat.add_notice("/rename needs a name: /rename NAME", "error")
        return
    try:
        host.session = await host.sessions.rename(host.session.id, name)
    except PicochatError as exc:
        await chat.add_notice(exc.user_line(), "error")
        return
    await chat.add_notice(f"Session renamed to {name}")
    host.refresh_status()


async def cmd_delete(host: CommandHost, _: str) -> None:
    async def answered(yes: bool | None) -> None:
        if not yes:
            return
        try:
            await host.sessions.delete(host.session.id)
            others = [s for s in await host.sessions.sessions() if s.id != host.session.id]
            await host.open_session(others[0] if others else await host.sessions.create())
        except PicochatError as exc:
            await host.chat.add_notice(exc.user_line(), "error")
            return
        host.notify(literal("Session deleted (its rows stay in the database)"))
    host.push_screen(ConfirmScreen(f"Delete session {host.session.name!r}?"), answered)


async def cmd_model(host: CommandHost, name: str) -> None:
    chat = host.chat
    if not name:
        current = host.worker.model
        lines = [f"Model: {current.label} (window {host.worker.limits.window:,} tokens)"]
        if host.config.models:
            lines.append("Configured ([models] in the config file):")
            lines += [f"  {'●' if key == current.name else ' '} {key}  ·  {entry.model}"
                      for key, entry in sorted(host.config.models.items())]
        lines.append("/model NAME switches: one of these keys, \"offline\", or a litellm "
                     "model string such as openai/gpt-4o-mini")
        await chat.add_notice("\n".join(lines))
        return
    try:
        resolved, provider = open_model(host.config, host.session, name, said_as="/model")
    except PicochatError as exc:
        await chat.add_notice(exc.user_line(), "error")
        return
    await host.open_session(await host.sessions.set_model(host.session.id, name),
                            (resolved, provider))
    await host.chat.add_notice(f"Model: {resolved.label}; window "
                                              f"{host.worker.limits.window:,} tokens")


async def cmd_system(host: CommandHost, text: str) -> None:
    chat = host.chat
    if not text:
        own = (await host.worker.stored()).system_prompt is not None
        origin = "this session's own" if own else "the agent's ([agents.default])"
        await chat.add_notice(f"System prompt ({origin}): {host.worker.system_prompt or '(none)'}"
                              "\n/system TEXT replaces it for this session; "
                              "/system default goes back to the agent's")
        return
    reset = text.strip().lower() == "default"
    if host.worker.busy:
        await chat.add_notice("/system is queued: it applies when the current answer ends")
    await host.worker.set_system_prompt(None if reset else text,
                                        host.config.agent.system_prompt)
    await chat.add_notice("System prompt back to the agent's" if reset else
                          "System prompt replaced for this session (saved)")
    host.refresh_status()


SAID_BY = {"user": "you", "assistant": "answer", "tool": "tool result"}  # a hit's role, as read


async def cmd_search(host: CommandHost, query: str) -> None:
    chat = host.chat
    if not query:
        await chat.add_notice("/search needs some words: /search TEXT", "error")
        return
    hits, total = await host.worker.search(query, limit=20)
    if not hits:
        await chat.add_notice(f"No message matches {query!r}")
        return
    choices = [(str(h.seq), f"message {h.seq} · {SAID_BY.get(h.role, h.role)}"
                            f"{' (undone)' if h.retracted else ''}: "
                            + " ".join(h.snippet.split())) for h in hits]

    async def picked(seq: str | None) -> None:
        if seq is not None and not await chat.reveal(int(seq)):
            host.notify(literal(f"Message {seq} is not shown in this transcript"),
                        severity="warning")
    told = search_title(query, len(hits), total)
    host.push_screen(PickScreen(f"{told} · Enter jumps (\"quotes\" for a phrase)", choices),
                     picked)


def search_title(query: str, shown: int, total: int) -> str:
    """How many messages match, in words: those holding `query` as written (`total`) may be
    fewer than the list, which then goes on with the best holding its words."""
    if total == 0:
        return f"no message holds {query!r} as written; the best holding its words"
    if total < shown:
        held = "1 message holds" if total == 1 else f"{total:,} messages hold"
        return f"{held} {query!r} as written (first), then the best holding its words"
    if total == shown:
        return f"1 message matches {query!r}" if total == 1 else \
            f"{total:,} messages match {query!r}"
    return f"the {shown} best of {total:,} messages matching {query!r}"


async def cmd_copy(host: CommandHost, _: str) -> None:
    """`/copy`: the newest answer the transcript shows, as shown: not one another picochat
    wrote since, and none of the escapes or invisible characters the screen did not show."""
    answer = await host.chat.last_answer()
    if answer is None:
        await host.chat.add_notice("No answer to copy yet")
        return
    copy_shown(host.chat, answer.copy_text(), "the last answer")


async def cmd_export(host: CommandHost, arg: str) -> None:
    chat = host.chat
    every = "--all-branches" in arg.split()  # every branch, each whole
    words = " ".join(w for w in arg.split(" ") if w != "--all-branches").split(maxsplit=1)
    fmt = "md"
    if words and words[0].lower() in FORMATS:
        fmt = words.pop(0).lower()
    default = re.sub(r"[^\w.-]+", "-", host.session.name).strip("-.") or "session"
    target = Path(words[0] if words else f"{default}.{fmt}").expanduser()
    try:  # a refusal (a folder, a link, picochat's own file) is said before any question
        await asyncio.to_thread(check_export_target, target, host.sessions.path, _own(host))
    except PicochatError as exc:
        await chat.add_notice(f"export failed: {exc.user_line()}", "error")
        return
    if target.exists():  # a regular file: an earlier export, or one of the user's
        async def answered(yes: bool | None) -> None:
            if yes:
                await _export(host, fmt, target, every)
            else:
                await chat.add_notice(f"Not exported: {target.resolve()} is left as it was")
        host.push_screen(ConfirmScreen(f"{target.resolve()} exists. Overwrite it?"), answered)
        return
    await _export(host, fmt, target, every)


def _own(host: CommandHost) -> tuple[Path, ...]:
    """picochat's own files an export must never replace, besides the database."""
    return (host.paths.config_file, host.paths.log_file) if host.paths else ()


async def _export(host: CommandHost, fmt: str, target: Path, every: bool = False) -> None:
    """The branch on screen, or (`every`) every branch, each whole."""
    from picochat.export import export_all, write_export_text

    chat = host.chat
    own = _own(host)
    try:  # the same refusals and failure lines as `picochat export -o`
        if every:
            records = await host.worker.branch_records()
            done = await asyncio.to_thread(
                lambda: write_export_text(export_all(records, fmt), target,
                                          host.sessions.path, own))
        else:
            record = await host.worker.record()
            done = await asyncio.to_thread(write_record, record, fmt, target,
                                           host.sessions.path, own)
    except PicochatError as exc:
        await chat.add_notice(f"export failed: {exc.user_line()}", "error")
        return
    what = f"every branch ({done.messages:,} messages)" if every else \
        f"{done.messages:,} messages"
    await chat.add_notice(f"Exported {what} to {target.resolve()}")


async def cmd_theme(host: CommandHost, name: str) -> None:
    chat = host.chat
    names = host.theme_names
    if not name:
        await chat.add_notice("Themes: " + ", ".join(
            f"[{n}]" if n == host.theme else n for n in names))
        return
    if name not in names:
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        await chat.add_notice(f"unknown theme {name!r}{hint} (/theme lists them)", "error")
        return
    await chat.add_notice(f"Theme: {name}{host.set_theme(name)}")


async def cmd_help(host: CommandHost, _: str) -> None:
    host.action_help()


async def cmd_quit(host: CommandHost, _: str) -> None:
    host.exit()


async def run(host: CommandHost, text: str) -> None:
    """Run the slash command `text`: an unknown one, or a locked or full database, is one
    line in the transcript, and the app goes on."""
    try:
        parsed = slash.parse(text)
    except slash.UnknownCommand as exc:
        await host.chat.add_notice(str(exc), "error")
        return
    try:
        await HANDLERS[parsed.name](host, parsed.arg)
    except PicochatError as exc:
        await host.chat.add_notice(exc.user_line(), "error")


HANDLERS: dict[str, Handler] = {
    "compact": cmd_compact,
    "uncompact": cmd_uncompact,
    "info": cmd_info,
    "context": cmd_context,
    "tools": cmd_tools,
    "reload": cmd_reload,
    "branches": cmd_branches,
    "checkpoints": cmd_checkpoints,
    "clear": cmd_clear,
    "pin": cmd_pin,
    "pins": cmd_pins,
    "unpin": cmd_unpin,
    "stop": cmd_stop,
    "undo": cmd_undo,
    "retry": cmd_retry,
    "new": cmd_new,
    "sessions": cmd_sessions,
    "fork": cmd_fork,
    "rename": cmd_rename,
    "delete": cmd_delete,
    "model": cmd_model,
    "system": cmd_system,
    "search": cmd_search,
    "copy": cmd_copy,
    "export": cmd_export,
    "theme": cmd_theme,
    "help": cmd_help,
    "quit": cmd_quit,
}
