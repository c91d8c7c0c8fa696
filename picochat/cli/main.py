"""`picochat` entry point: parse arguments, run one command, map errors to exit statuses.

Imports are lazy: `picochat --version` loads nothing but this file and argparse, and litellm
is imported only when a real model is called.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

COMMANDS = ("ask", "compact", "info", "clear", "sessions", "history", "checkpoints", "export",
            "config")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"picochat: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    from picochat import __version__

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", metavar="DIR", default=argparse.SUPPRESS,
                        help="folder for the database and log (env PICOCHAT_DATA_DIR)")
    common.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                        help="config file (env PICOCHAT_CONFIG_DIR names its folder)")
    session = argparse.ArgumentParser(add_help=False)
    session.add_argument("--session", metavar="S", default=argparse.SUPPRESS,
                         help="session id or name (default: the most recently active)")
    app_session = argparse.ArgumentParser(add_help=False)  # the app reopens what it showed
    app_session.add_argument("--session", metavar="S", default=argparse.SUPPRESS,
                             help="session id or name (default: the one the app showed last)")
    model = argparse.ArgumentParser(add_help=False)
    model.add_argument("--model", metavar="M", default=argparse.SUPPRESS,
                       help="a [models] key or a litellm model string, or 'offline'")
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print JSON")

    parser = _Parser(prog="picochat", parents=[common, app_session, model],
                     description="A terminal chat client for any LLM, with built-in context "
                                 "compaction. Without a command, opens the chat app.")
    parser.add_argument("--version", action="version", version=f"picochat {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("ask", parents=[common, session, model, as_json],
                       help="one turn without the app; streams the reply to stdout")
    p.add_argument("text", metavar="TEXT", help="your message, or - to read it from stdin")
    p = sub.add_parser("compact", parents=[common, session, model, as_json],
                       help="compact the session's context now (/compact)")
    p.add_argument("--focus", metavar="TEXT", help="what the summary should keep in focus")
    p.add_argument("--all", action="store_true",
                   help="fold all but the newest turn, however many tokens "
                        "keep_recent_tokens would keep raw (/compact all)")
    p.add_argument("--undo", action="store_true",
                   help="undo the last compaction: the previous checkpoint becomes active again")
    sub.add_parser("info", parents=[common, session, model, as_json],
                   help="context usage of the session (/info)")
    sub.add_parser("clear", parents=[common, session],
                   help="start the context afresh; the raw history is kept (/clear)")
    sub.add_parser("sessions", parents=[common, as_json], help="list sessions")
    sub.add_parser("history", parents=[common, session, as_json],
                   help="the session's raw log, all of it")
    sub.add_parser("checkpoints", parents=[common, session, as_json],
                   help="every checkpoint of the session, newest first")
    p = sub.add_parser("export", parents=[common, session], help="export a session")
    p.add_argument("--format", required=True, choices=("md", "json"), help="md or json")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p = sub.add_parser("config", parents=[common], help="config file: path, show, init")
    p.add_argument("action", choices=("path", "show", "init"))
    p.add_argument("--force", action="store_true", help="with init: replace an existing file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    session = getattr(args, "session", None)
    if session is not None and not session.strip():  # else "" would mean the latest session
        parser.error("--session is empty: give a session id or name, or leave it out for the "
                     "most recent session")
    try:
        from picochat.cli import commands

        return commands.run(args)
    except KeyboardInterrupt:
        sys.stderr.write("picochat: interrupted\n")
        return 130
    except BrokenPipeError:  # the reader left (`| head`): nothing more to say to it
        from picochat.cli.commands import silence_stdout

        silence_stdout()
        return 0
    except Exception as exc:  # noqa: BLE001 - the last line of defence: never a traceback
        from picochat.errors import PicochatError

        if isinstance(exc, PicochatError):
            from picochat.textsafe import clean  # error text may quote a server or a file

            sys.stderr.write(f"picochat: {clean(exc.user_line())}\n")
            return exc.exit_status
        import logging

        import traceback

        logging.getLogger("picochat").error(  # frames only: the message may hold user text
            "internal_error kind=%s\n%s", type(exc).__name__,
            "".join(traceback.format_tb(exc.__traceback__)))
        sys.stderr.write(f"picochat: internal error ({type(exc).__name__}); the log has details\n")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
