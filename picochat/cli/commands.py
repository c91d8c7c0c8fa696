"""What each CLI command does. Every command goes through the same `App` context: paths, the
validated config and the store, opened lazily so a command touches only what it needs.
Modules a command alone needs (render and the fact ledger under it, the app, litellm) are
imported in it: the app's first frame waits for no module it does not show."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from picochat.config import Config, effective_config_text, load_config
from picochat.errors import ConfigError, OutputError, SessionNotFound, UsageError
from picochat.logs import report_log_off_to, setup_logging
from picochat.paths import Paths, resolve_paths
from picochat.cli.output import (
    dump_json,
    err,
    for_terminal,
    for_terminal_json,
    json_text,
    note,
    out,
    say,
    write_stdout,
)

if TYPE_CHECKING:  # the chat app's first frame waits for neither: imported where used
    from picochat.messages import Session
    from picochat.storage.store import Store

log = logging.getLogger("picochat.cli")


@dataclass
class App:
    args: argparse.Namespace
    _store: Store | None = field(default=None, init=False)
    _left_open: bool = field(default=False, init=False)

    def opt(self, name: str) -> Any:
        return getattr(self.args, name, None)

    @cached_property
    def paths(self) -> Paths:
        return resolve_paths(self.opt("data_dir"), self.opt("config"))

    @cached_property
    def config(self) -> Config:
        path = self.paths.config_file
        if self.opt("config") and not path.exists():  # a missing default file is fine; a typo not
            raise ConfigError(f"{path}: no such config file", "check the --config path, or "
                              "create it with `picochat config init --config FILE`")
        return load_config(path)

    @property
    def store(self) -> Store:
        if self._store is None:
            from picochat import token_counts
            from picochat.storage.store import open_store

            setup_logging(self.paths.log_file, self.opt("log_level") or logging.INFO)
            token_counts.keep_rank_tables(self.paths.cache_dir)
            log.debug("command=%s", self.args.command or "app")
            self._store = open_store(self.paths.database)
        return self._store

    @property
    def has_database(self) -> bool:
        """False on a fresh machine: a command that only reads then creates nothing."""
        return self.paths.database.exists()

    def session(self) -> Session:
        """`--session` (id or name) or the most recently active session; must exist."""
        ref = self.opt("session")
        if not self.has_database:  # no session can exist: say so without creating the database
            if ref:
                raise SessionNotFound(f"no session named {ref!r}", "there are no sessions yet")
            raise UsageError("no sessions yet", 'start one with: picochat ask "hello"')
        if ref:
            return self.store.require_session(ref)
        latest = self.store.latest_session()
        if latest is None:
            raise UsageError("no sessions yet", 'start one with: picochat ask "hello"')
        return latest

    def leave_open(self) -> None:
        """The store is in use by a thread no one waits for: the process's exit closes it."""
        self._left_open = True

    def close(self) -> None:
        if self._store is not None and not self._left_open:
            self._store.close()


def run(args: argparse.Namespace) -> int:
    app = App(args)
    # A log that stops being written says so once: on stderr, or in the app as a notice
    # (held until its screen is up: Textual owns the terminal from then on).
    report_log_off_to(err if args.command is not None else None)
    if args.command is None:
        if not has_terminal():  # else Textual draws into a pipe and spins, forever
            raise UsageError("the chat app needs a terminal, and stdin or stdout is not one",
                             'for one turn without the app: picochat ask "TEXT", '
                             "or picochat ask - to read the message from stdin")
        try:
            app.config  # noqa: B018 - an invalid config is exit 2 before the screen changes
            return cmd_tui(app)
        finally:
            app.close()
            report_log_off_to(err)  # the terminal is back: a line the app could not show
    try:
        if args.command not in NO_CONFIG and not (args.command == "config"
                                                  and args.action in ("init", "path")):
            app.config  # noqa: B018 - an invalid config is exit 2 for every command
        return HANDLERS[args.command](app)
    finally:
        app.close()


def has_terminal() -> bool:
    """Whether the chat app can run: it reads keys from stdin and the user watches stdout."""
    return all(stream is not None and stream.isatty() for stream in (sys.stdin, sys.stdout))


# --- the app -------------------------------------------------------------------------------------


def cmd_tui(app: App) -> int:
    """`picochat`: the chat app on `--session` (created when no session has that name), else
    the session the app showed when it last quit (the one the user was viewing, not the one
    written to last), else the most recently active session, else a new one.

    The screen comes first: the app draws its bar, prompt and keys, then reads the session's
    newest messages with the store alone (`first_screen.first_look`) and draws them, then opens
    the session and the model (`catalog.open_chat`, with the engine's modules), in a thread. A
    missing key, a bad setting or a damaged database found there ends the app, and is said
    here in the same one line and exit status as any command's, once the terminal is back."""
    from picochat.tui.app import PicochatApp
    from picochat.tui.chat import PAGE

    def look() -> Any:
        from picochat.first_screen import first_look

        return first_look(app.store, app.opt("session"), PAGE)

    def open_chat() -> Any:
        from picochat.catalog import open_chat

        return open_chat(app.store, app.config, app.opt("session"), app.opt("model"), PAGE)

    tui = PicochatApp.opening(open_chat, app.config, app.paths, quit_on_signals=True, look=look)
    try:
        tui.run()
    finally:
        tui.release_signals()
    if tui.exit_note:  # the screen is restored: a line the user can still read
        err(tui.exit_note)
    if tui.open_error is not None:
        raise tui.open_error
    if not tui.opened:  # quit while it opened: that thread may wait on another picochat's
        app.leave_open()  # lock, and closing its store would wait with it; exiting does not
    # The session on screen at the end, switched to or not, is the one the next start opens.
    # Recorded after the app, not before: an app that failed (a damaged database) writes
    # nothing, and a start shows its first frame without waiting for a write lock.
    if tui.opened and (not tui.return_code or tui.signalled):
        from picochat.session import note_opened

        note_opened(app.store, tui.session.id)
    # An error that escaped the app (a damaged database found while building the screen) was
    # printed by Textual as its one `picochat:` line (tui.app.OneLine): exit 1, not 0.
    return tui.return_code or (128 + tui.signalled if tui.signalled else 0)


# --- ask -----------------------------------------------------------------------------------------


# A message is held whole in memory, stored and counted: past this size it is refused before
# anything is read further or written (a 10 MB paste is well within it).
MAX_MESSAGE_BYTES = 32 << 20
MAX_MESSAGE_TEXT = "32 MiB"


def cmd_ask(app: App) -> int:
    text = _message(app.args.text)
    from picochat.opening import open_model

    session = _named_or_latest(app)
    # fails before anything is written
    resolved, provider = open_model(app.config, session, app.opt("model"))
    if session is None:  # another ask may be creating it too
        refused = _over_window(text, resolved, app.config)
        if refused is not None:  # no empty session is left behind (the worker checks too)
            err(f"{refused.user_line()}; nothing was sent or saved")
            return refused.exit_status
        session = app.store.find_or_create_session(app.opt("session"))
    return asyncio.run(_ask(app, session, resolved, provider, text))


def _over_window(text: str, resolved: Any, config: Config) -> Any:
    """The refusal of a message larger than the model's whole window, or None."""
    from picochat.budget import message_over_window, too_long_error
    from picochat.models import limits_for

    limits = limits_for(resolved, config.context_compaction)
    size = message_over_window(text, limits)
    return None if size is None else too_long_error(size, limits)


def _named_or_latest(app: App) -> Session | None:
    """The session `-s` names, or the most recently active one; None when there is none yet
    (without a database: nothing is created early), for a command that then creates it."""
    if not app.has_database:
        return None
    ref = app.opt("session")
    return app.store.find_session(ref) if ref else app.store.latest_session()


def _worker(app: App, session: Session, resolved: Any, provider: Any) -> Any:
    from picochat.session import SessionWorker

    return SessionWorker.from_config(app.store, session.id, resolved, provider, app.config)


async def _ask(app: App, session: Session, resolved: Any, provider: Any, text: str) -> int:
    from picochat.cli.thinking import ThinkingLine
    from picochat.failures import turn_failure_line
    from picochat.providers.base import TextDelta, ThinkingDelta
    from picochat.session import (CUT_AT_LIMIT, Compacted, Notice, RetryWaiting, ToolRan,
                                  TurnFailed)
    from picochat.tools.registry import tool_label

    as_json = app.opt("json")
    stdout = _Stdout()
    thinking = ThinkingLine()  # stderr on a terminal only: stdout is the answer
    streamed_newline = True
    from picochat.compaction import report
    from picochat.textsafe import StreamCleaner

    screen = StreamCleaner() if sys.stdout.isatty() else None  # an escape may span two deltas
    async with _worker(app, session, resolved, provider) as worker:
        for note in worker.recovered_notes():
            err(note)
        handle = worker.submit_turn(text)
        stopped_by = _stop_on_signals(handle)
        try:
            async for event in handle:
                if stopped_by:  # the terminal may be gone: nothing more is written to it
                    continue
                if isinstance(event, ThinkingDelta):
                    thinking.thinking()
                    continue
                thinking.done()
                if isinstance(event, TextDelta) and not as_json:
                    piece = screen.feed(event.text) if screen else event.text
                    if piece:
                        stdout.write(piece)
                        streamed_newline = piece.endswith("\n")
                elif isinstance(event, ToolRan) and not as_json:
                    name = tool_label(event.name)
                    what = f"{name} {event.detail}" if event.detail else name
                    err(f"ran {what} ({event.status}), result saved as message #{event.seq}")
                elif isinstance(event, Compacted) and not as_json:
                    note = report.compaction_note(event.outcome)
                    if note:
                        err(note)
                elif isinstance(event, Notice):
                    err(event.text)
                elif isinstance(event, RetryWaiting):
                    err(event.text)
        except asyncio.CancelledError:  # Ctrl-C: keep what arrived, then report
            handle.cancel()
        outcome = await handle.result()
        if not stopped_by:
            thinking.done()
    compaction = outcome.compactions[-1].as_dict() if outcome.compactions else None
    if stopped_by:  # SIGTERM, SIGHUP: what arrived is saved; the terminal may be gone
        saved = outcome.saved if isinstance(outcome, TurnFailed) else "the whole answer is saved"
        if not as_json and not streamed_newline:  # the line must not stick to the answer
            _quietly(stdout.write, "\n")
        _quietly(err, f"stopped by signal {stopped_by[0]}; {saved}")
        return 128 + stopped_by[0]
    rest = screen.flush() if screen and not as_json else ""
    if rest:
        stdout.write(rest)
        streamed_newline = rest.endswith("\n")
    if not as_json and not streamed_newline:
        stdout.write("\n")
    if isinstance(outcome, TurnFailed):
        if as_json:
            error = {"kind": outcome.error.kind, "message": outcome.error.user_line()}
            stdout.write(json_text({"session_id": session.id, "reply": None, "usage": None,
                                    "compaction": compaction, "error": error}))
        err(turn_failure_line(outcome, "nothing was sent or saved"))
        return 130 if outcome.cancelled else outcome.error.exit_status
    if outcome.cut:  # saved, and a success: the line says it is incomplete (status 0)
        err(CUT_AT_LIMIT)
    if app.opt("model") and session.model != app.opt("model"):
        app.store.set_session_model(session.id, app.opt("model"))  # remembered once it worked
    if as_json:
        usage = ({"prompt_tokens": outcome.usage.prompt_tokens,
                  "completion_tokens": outcome.usage.completion_tokens}
                 if outcome.usage else None)
        stdout.write(json_text({"session_id": session.id, "reply": outcome.reply,
                                "usage": usage, "compaction": compaction}))
    stdout.check()
    return 0


def _stop_on_signals(handle: Any) -> list[int]:
    """SIGTERM and SIGHUP stop the turn as Ctrl-C does: its partial answer saved (marked
    interrupted). Returns the list the signal's number lands in."""
    import signal

    got: list[int] = []

    def stop(signum: int) -> None:
        got.append(signum)
        handle.cancel()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(signum, stop, signum)
    return got


def _quietly(write: Any, *args: Any) -> None:
    """Write, unless the terminal is gone (closed after SIGHUP)."""
    try:
        write(*args)
    except OSError:
        pass


def _message(words: list[str], command: str = "ask") -> str:
    """The words given, joined; or stdin, with `-` or with no words when stdin is a pipe or a
    file. No words and a terminal: a usage error, not a wait for input the user never meant."""
    if words == ["-"] or (not words and _stdin_is_data()):
        text = _read_stdin()
    elif not words:
        raise UsageError("no message given", f'pass it as words (picochat {command} "hello") '
                         f"or pipe it in (echo hello | picochat {command})")
    else:
        text = " ".join(words)
        if len(text.encode("utf-8", "surrogatepass")) > MAX_MESSAGE_BYTES:
            _too_big()
    if not text.strip():
        raise UsageError("the message is empty", "pass some words, or pipe text in")
    return text


def _stdin_is_data() -> bool:
    """Whether stdin is something to read (a pipe, a file) rather than a terminal or closed."""
    try:
        return sys.stdin is not None and not sys.stdin.isatty()
    except (OSError, ValueError):
        return False


def _read_stdin() -> str:
    """At most one byte over the cap: `ask - </dev/zero` must end, with a line, not MemoryError."""
    if sys.stdin is None:
        raise UsageError("stdin is closed; there is no message to read", 'pass it as words: '
                         'picochat ask "hello"')
    data = sys.stdin.buffer.read(MAX_MESSAGE_BYTES + 1)
    if len(data) > MAX_MESSAGE_BYTES:
        _too_big()
    return data.decode("utf-8", errors="replace")


def _too_big() -> None:
    raise UsageError(f"the message is larger than {MAX_MESSAGE_TEXT}, the most one message may "
                     "hold; nothing was sent or saved", "split it into smaller messages")


@dataclass
class _Stdout:
    """Where `ask` writes the answer. A write that fails (a full disk, a reader gone) stops the
    output, never the turn: the answer is still saved whole, and the failure told after."""

    failed: BaseException | None = None

    def write(self, text: str) -> None:
        if self.failed is None:
            try:
                write_stdout(text)
            except (BrokenPipeError, OutputError) as exc:
                self.failed = exc

    def check(self) -> None:
        """After a saved turn: one line if the answer could not be shown (a closed pipe is not
        news to the reader who closed it)."""
        if isinstance(self.failed, OutputError):
            raise OutputError(f"{self.failed.message}; your message and the answer are saved",
                              "`picochat history` shows them")


# --- sessions, history, checkpoints, export, clear -----------------------------------------------


def cmd_sessions(app: App) -> int:
    from picochat import render

    sessions = app.store.list_sessions() if app.has_database else []  # none: create nothing
    if app.opt("names"):  # for shell completion: one name a line, those a shell can take
        write_stdout("".join(f"{s.name}\n" for s in sessions
                             if s.name.isprintable() and not s.name.startswith("-")))
    elif app.opt("json"):
        dump_json([render.session_json(s) for s in sessions])
    else:
        out(for_terminal(render.sessions_table(sessions)))
    return 0


def _active_checkpoint(app: App, session: Session) -> Any:
    cid = session.active_context_checkpoint_id
    return app.store.checkpoint(cid) if cid else None


def cmd_history(app: App) -> int:
    from picochat import render
    from picochat.session import read_record

    sid = app.session().id  # first: on a fresh machine, it refuses before a store is made
    record = read_record(app.store, sid, app.opt("branch"))
    session, messages = record.session, record.messages
    active = _active_checkpoint(app, session)
    if app.opt("json"):
        dump_json({"session": render.session_json(session),
                   "messages": [render.message_json(m, session, active) for m in messages]})
    else:
        out(for_terminal(render.history_text(session, messages, active)))
    return 0


def cmd_branches(app: App) -> int:
    from picochat.export import branch_heading
    from picochat.textsafe import first_line

    session = app.session()
    branches = app.store.branches(session.id)
    if app.opt("json"):
        dump_json([{"branch": b.id, "parent": b.parent, "fork_seq": b.fork_seq,
                    "turns": b.turns, "last_seq": b.last_seq, "current": b.current,
                    "first": b.first} for b in branches])
        return 0
    lines = [f"Branches of {session.name}:"]
    for b in branches:
        lines.append(f"{'*' if b.current else ' '} {branch_heading(b)}: {b.size}"
                     + (f", begins {first_line(b.first, 60)!r}" if b.first else ""))
    if len(branches) < 2:
        lines.append("One branch: in the app, e on an earlier message of yours starts another.")
    out(for_terminal("\n".join(lines)))
    return 0


def cmd_fork(app: App) -> int:
    from picochat.session import fork_said

    source = app.session()
    done = app.store.fork_session(source.id, app.args.name, app.opt("at"))
    if app.opt("json"):
        dump_json({"session_id": done.session.id, "name": done.session.name,
                   "source_id": source.id, "at": done.at, "checkpoint_id": done.checkpoint,
                   "facts": done.facts, "pins": done.pins})
        return 0
    out(for_terminal(f"{fork_said(done)}.\nCommands without --session now go to "
                     f"{done.session.name}; -s {source.name} goes back."))
    return 0


def cmd_checkpoints(app: App) -> int:
    from picochat import render

    session = app.session()
    checkpoints = app.store.checkpoints(session.id)
    active = session.active_context_checkpoint_id
    if app.opt("json"):
        from picochat.compaction.report import numbers

        numbered = numbers(checkpoints)
        dump_json([render.checkpoint_json(c, active, numbered[c.id]) for c in checkpoints])
    else:
        out(for_terminal(render.checkpoints_table(checkpoints, active)))
    return 0


def cmd_export(app: App) -> int:
    from picochat.export import export_branches, export_session, write_export_text

    session, fmt = app.session(), app.args.format
    every = app.args.all_branches  # every branch, each whole; else the one in use
    done = (export_branches if every else export_session)(app.store, session.id, fmt)
    if app.args.output and app.args.output != "-":
        from pathlib import Path

        target = Path(app.args.output).expanduser()
        # refused (exit 2): picochat's own files, anything but a regular or new file
        write_export_text(done, target, app.store.path,
                          also=(app.paths.config_file, app.paths.log_file))
        note(f"Exported every branch of {done.session.name} ({done.messages} messages) "
             f"to {target}" if every else
             f"Exported {done.messages} messages of {done.session.name} to {target}")
    elif fmt == "md":  # cleaned on a terminal, as stored in a pipe or a file
        write_stdout(for_terminal(done.text))
    else:
        write_stdout(for_terminal_json(done.text))
    return 0


def cmd_clear(app: App) -> int:
    session = app.session()
    cleared = app.store.clear_context(session.id)
    from picochat.pins import pins_stay

    pinned = len(app.store.pins(session.id))
    say(f"Context cleared for {cleared.name}: the next turn starts fresh"
        f"{pins_stay(pinned, 'picochat unpin N')}.")
    say(f"Raw history unchanged: {cleared.message_count} messages stay in `picochat history`.")
    say(f"`picochat compact -s {cleared.name} --undo` brings the context back.")
    return 0


# --- compact, info ---------------------------------------------------------------------------------


def cmd_compact(app: App) -> int:
    if app.opt("undo"):
        if with_undo := [f for f in ("preview", "all", "focus") if app.opt(f)]:
            raise UsageError(f"--undo cannot go with --{with_undo[0]}",
                             "undo the last compaction alone, or compact without --undo")
        return _uncompact(app, app.session())
    session = app.session()
    from picochat.opening import open_model

    resolved, provider = open_model(app.config, session, app.opt("model"))
    return asyncio.run(_compact(app, session, resolved, provider))


async def _compact(app: App, session: Session, resolved: Any, provider: Any) -> int:
    from picochat.compaction import report
    from picochat.compaction.compact import COMPACTED, NOTHING_TO_COMPACT
    from picochat.failures import compaction_failure_line

    from picochat.compaction.preview import CompactionPreview

    everything = bool(app.opt("all"))
    async with _worker(app, session, resolved, provider) as worker:
        if app.opt("preview"):
            outcome = await worker.preview(app.opt("focus"), everything=everything)
        else:
            outcome = await worker.compact(app.opt("focus"), everything=everything)
        limits = worker.limits
    if isinstance(outcome, CompactionPreview):  # nothing written: exit 0 whatever the gate said
        if app.opt("json"):
            dump_json(outcome.as_dict())
        else:
            out(for_terminal(report.preview_text(outcome, session.name)))
        return 0
    if app.opt("json"):
        dump_json(outcome.as_dict())
    elif outcome.status == COMPACTED:
        say(report.compacted_lines(outcome))
        note(f"Session {session.name}: checkpoint {outcome.checkpoint.id} in use")
        if dropped := report.dropped_note(outcome):
            err(dropped)
    elif outcome.status == NOTHING_TO_COMPACT:
        say("Nothing to compact")
        err(f"{session.name}: "
            + report.nothing_reason(outcome, limits, None if everything else "--all"))
    if outcome.error is not None:
        err(compaction_failure_line(outcome.error))
        return outcome.error.exit_status
    return 0


def _uncompact(app: App, session: Session) -> int:
    result = app.store.uncompact(session.id)
    if app.opt("json"):
        dump_json({"status": "uncompacted" if result.undone else
                   "uncleared" if result.uncleared else "nothing_to_uncompact",
                   "undone_checkpoint_id": result.undone,
                   "active_checkpoint_id": result.active,
                   "context_generation": result.context_generation})
    elif result.uncleared:
        say(f"Clear undone for {session.name}: the context from before `picochat clear` is "
            "back" + (f", with checkpoint {result.active}" if result.active else ""))
        say("Raw history unchanged")
    elif result.undone is None:
        say(f"Nothing to uncompact in {session.name}: no active checkpoint, and no clear to "
            "take back")
    else:
        say(f"Compaction undone in {session.name}: {result.undone} is no longer active")
        say(f"The context now uses checkpoint {result.active}" if result.active
            else "The context now uses the raw history")
        say("Raw history unchanged")
    return 0


def cmd_info(app: App) -> int:
    """The app's `/info` card: the figures of the very worker `ask` and the app run (the
    session's own system prompt, its tools, what the server taught), never a copy of them.
    The model is named, not opened: no key is needed to read them."""
    from picochat.opening import Unopened, chosen_model

    session = app.session()
    resolved = chosen_model(app.config, session, app.opt("model"))
    usage = _worker(app, session, resolved, Unopened(resolved)).info()
    if app.opt("json"):
        dump_json(usage.as_dict())
    else:
        say(usage.text())  # the session's name is the user's, and may be anything
    return 0


# --- pins ----------------------------------------------------------------------------------------


def _pins_worker(app: App, session: Session) -> Any:
    """A worker for the session's limits (the pins' cap follows the model's window); the
    model is named, not opened: pinning needs no key."""
    from picochat.opening import Unopened, chosen_model

    resolved = chosen_model(app.config, session, app.opt("model"))
    return _worker(app, session, resolved, Unopened(resolved))


def cmd_pin(app: App) -> int:
    seq = app.opt("message")
    if seq is not None and app.args.text:
        raise UsageError("give the text or --message SEQ, not both",
                         'picochat pin "TEXT" or picochat pin --message 12')
    text = None if seq is not None else _message(app.args.text, "pin")
    if seq is not None:
        session = app.session()  # a message to pin needs a session that has it
    else:
        session = _named_or_latest(app) or app.store.find_or_create_session(app.opt("session"))
    pin = _pins_worker(app, session).add_pin(text, seq)
    say(f"Pinned #{pin.number} in {session.name} ({pin.tokens:,} tokens): the model reads it "
        f"word for word in every request; `picochat unpin {pin.number}` removes it")
    return 0


def cmd_pins(app: App) -> int:
    from picochat import render
    from picochat.budget import pin_cap, pins_cost
    from picochat.pins import pin_label

    session = app.session()
    worker = _pins_worker(app, session)
    pins, limits = worker.pins(), worker.limits
    cost, cap = pins_cost(limits, pins), pin_cap(limits)
    if app.opt("json"):
        dump_json({"session_id": session.id, "session_name": session.name,
                   "pins": [render.pin_json(p) for p in pins],
                   "pins_tokens": cost, "pin_cap_tokens": cap})
        return 0
    if not pins:
        say(f"No pins in {session.name}: `picochat pin TEXT` keeps a statement in every "
            "request")
        return 0
    lines = [f"Pins of {session.name}: {cost:,} tokens of every request (cap {cap:,})"]
    lines += [pin_label(p, 100) for p in pins]
    say("\n".join(lines))
    return 0


def cmd_unpin(app: App) -> int:
    from picochat.pins import pin_label

    session = app.session()
    pin = _pins_worker(app, session).remove_pin(app.args.number)
    say(f"Unpinned from {session.name}: {pin_label(pin)}")
    return 0


# --- config --------------------------------------------------------------------------------------


def cmd_config(app: App) -> int:
    action = app.args.action
    path = app.paths.config_file
    first = _first_model(app)
    if action == "path":
        out(str(path))
    elif action == "show":
        out(effective_config_text(app.config))
    else:
        from picochat.config_starter import write_starter_config

        write_starter_config(path, force=app.args.force, first=first)
        say(f"Wrote a starter config to {path}")
        if first is not None:
            say(f"default_model is {first.key}: [models.{first.key}] runs {first.model}"
                + (f" at {first.api_base}" if first.api_base else ""))
    return 0


def _first_model(app: App) -> Any:
    """`config init --model …`'s model, or None; the flags that need it refused without."""
    from picochat.config_starter import FirstModel

    given = {k: app.opt(k) for k in ("api_base", "token_limit", "name")
             if app.opt(k) is not None}
    model = app.opt("init_model")
    if model is None:
        if given:
            flag = "--" + next(iter(given)).replace("_", "-")
            raise UsageError(f"{flag} goes with --model", "picochat config init --model "
                             "openai/my-model --api-base http://127.0.0.1:8080/v1")
        return None
    if app.args.action != "init":
        raise UsageError("--model goes with init", "picochat config init --model MODEL")
    if app.opt("token_limit") is not None and app.opt("token_limit") <= 0:
        raise UsageError(f"--token-limit must be a positive number of tokens, got "
                         f"{app.opt('token_limit')}", "the server's context, e.g. 8192")
    return FirstModel(model, given.get("api_base"), given.get("token_limit"), given.get("name"))


# --- paths, completion ------------------------------------------------------------------------


def cmd_paths(app: App) -> int:
    """Where the files are, as this command line resolves them; nothing is created."""
    paths = app.paths
    where = {"config": paths.config_file, "database": paths.database, "log": paths.log_file,
             "themes": paths.user_themes_dir, "cache": paths.cache_dir}
    if app.opt("json"):
        dump_json({label: str(path) for label, path in where.items()})
    else:
        width = max(map(len, where))
        rows = [f"{label:<{width}}  {path}" for label, path in where.items()]
        out(for_terminal("\n".join(rows)))
    return 0


def cmd_completion(app: App) -> int:
    from picochat.cli.completion import completion_script
    from picochat.cli.parser import build_parser

    write_stdout(completion_script(build_parser(), app.args.shell))
    return 0


# Commands that read no config: they must work while the config is broken.
NO_CONFIG = ("paths", "completion")

HANDLERS = {
    "ask": cmd_ask,
    "compact": cmd_compact,
    "info": cmd_info,
    "clear": cmd_clear,
    "pin": cmd_pin,
    "pins": cmd_pins,
    "unpin": cmd_unpin,
    "sessions": cmd_sessions,
    "history": cmd_history,
    "branches": cmd_branches,
    "fork": cmd_fork,
    "checkpoints": cmd_checkpoints,
    "export": cmd_export,
    "config": cmd_config,
    "paths": cmd_paths,
    "completion": cmd_completion,
}
