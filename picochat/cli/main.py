"""`picochat` entry point: parse arguments, run one command, map errors to exit statuses.

Imports are lazy: `picochat --version` loads nothing but this file and argparse, and litellm
is imported only when a real model is called.
"""

from __future__ import annotations

import sys
from typing import Sequence

from picochat.cli.parser import build_parser

__all__ = ["build_parser", "main"]


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
