"""`picochat` entry point: parse arguments, run one command, map errors to exit statuses.

Imports are lazy: `picochat --version` loads nothing but this file and argparse, and litellm
is imported only when a real model is called.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from picochat.cli.parser import build_parser

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(commands=bool(argv))  # `picochat` alone: the app, at once
    args = _parse(parser, argv)
    session = getattr(args, "session", None)
    if session is not None and not session.strip():  # else "" would mean the latest session
        parser.error("--session is empty: give a session id or name, or leave it out for the "
                     "most recent session")
    chat_app = args.command is None
    if chat_app:  # no collection of start-up's objects: the app's first frame turns it back on
        from picochat.tui import idle_gc

        idle_gc.hold_until_first_frame()
    try:
        from picochat.logs import log_level

        args.log_level = log_level(verbose=getattr(args, "verbose", False))
        from picochat.cli import commands

        return commands.run(args)
    except KeyboardInterrupt:
        from picochat.cli.output import err

        err("interrupted")
        return 130
    except BrokenPipeError:  # the reader left (`| head`): nothing more to say to it
        from picochat.cli.output import silence_stdout

        silence_stdout()
        return 0
    except Exception as exc:  # noqa: BLE001 - the last line of defence: never a traceback
        from picochat.cli.output import err  # error text may quote a server or a file
        from picochat.errors import PicochatError

        if isinstance(exc, PicochatError):
            err(exc.user_line())
            return exc.exit_status
        err(f"internal error ({type(exc).__name__}); {_log_internal_error(args, exc)}")
        return 1
    finally:
        if chat_app:  # back on whatever happened before the first frame
            idle_gc.release_hold()


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse `argv`; the words of `ask`'s message may come before and after its flags
    (`picochat ask explain this -m offline`), as click-based tools allow."""
    args, extra = parser.parse_known_args(argv)
    if not extra:
        return args
    if args.command == "ask":
        if not any(word.startswith("-") for word in extra):
            args.text = [*args.text, *extra]
            return args
        parser.error(f"unrecognized arguments: {' '.join(extra)}; a message with words that "
                     "start with - goes after -- (picochat ask -- -v means?)")
    parser.error(f"unrecognized arguments: {' '.join(extra)}")
    raise AssertionError  # parser.error exits


def _log_internal_error(args: argparse.Namespace, exc: BaseException) -> str:
    """Log a bug's kind and frames (never its message: it may hold user text) to the log file,
    set up now if the command had not opened it; say where it went, for the one stderr line."""
    import logging
    import traceback

    from picochat.logs import setup_logging, where_details
    from picochat.paths import resolve_paths

    try:  # the command's own log (set up already if it opened the database)
        paths = resolve_paths(getattr(args, "data_dir", None), getattr(args, "config", None))
        setup_logging(paths.log_file, getattr(args, "log_level", logging.INFO))
        logging.getLogger("picochat").error(
            "internal_error kind=%s\n%s", type(exc).__name__,
            "".join(traceback.format_tb(exc.__traceback__)))
    except Exception:  # noqa: BLE001 - reporting a bug must not raise another
        pass
    return where_details()


if __name__ == "__main__":
    raise SystemExit(main())
