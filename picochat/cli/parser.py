"""The `picochat` command line: every command, flag and help text, in one argparse parser.

The parser is the one description of the surface: `main` runs it, and the shell completion
scripts are generated from it, so neither can drift from the other.
"""

from __future__ import annotations

import argparse
import sys

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
