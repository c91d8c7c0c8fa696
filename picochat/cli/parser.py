"""The `picochat` command line: every command, flag and help text, in one argparse parser.

The parser is the one description of the surface: `main` runs it, and the shell completion
scripts are generated from it (cli/completion.py), so neither can drift from the other. Each
command's help says what it does and shows an example, examples first where they can be.
"""

from __future__ import annotations

import argparse
from typing import Any
from textwrap import dedent, indent

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
SHELLS = ("bash", "zsh", "fish")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2, and help text is printed as
    written (it is wrapped by hand, with examples indented)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> None:  # type: ignore[override]
        from picochat.cli.output import err  # the message quotes the words given

        err(f"{message} (see `{self.prog} --help`)")
        raise SystemExit(2)


def _number(text: str) -> int:
    """A message, pin or branch number: a whole number SQLite can hold (a huge one would
    overflow its 64-bit integers: said here, not as an internal error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if not 0 <= value < 2**62:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 2**62, got {text}")
    return value


DESCRIPTION = """\
A terminal chat client for any LLM, with context compaction that never loses
a fact. Without a command, picochat opens the chat app.

examples:
  picochat                             the chat app, on the session last open
  picochat -s work -m ollama/llama3.2  the app on session "work", Ollama
  picochat ask why is the sky blue     one turn; the answer goes to stdout
  git diff | picochat ask -s review    piped stdin is the message
  picochat config init                 a config file that explains itself
"""

EPILOG = """\
environment:
  PICOCHAT_MODEL       the model when -m is not given
  PICOCHAT_DATA_DIR    folder for the database and the log (as --data-dir)
  PICOCHAT_CONFIG_DIR  folder of config.toml and themes/
  PICOCHAT_LOG_LEVEL   DEBUG, INFO (default), WARNING or ERROR; --verbose: DEBUG
  OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY, ...
                       provider keys, read as litellm reads them; a [models]
                       entry's api_key_env names another. With no model set,
                       an OpenAI key, then an Anthropic key, then a running
                       Ollama picks the model, else the offline one.
  OLLAMA_HOST, OLLAMA_API_BASE
                       where Ollama listens (default 127.0.0.1:11434)
  TIKTOKEN_CACHE_DIR   tokenizer files (default: those that come with litellm)
  HTTPS_PROXY, HTTP_PROXY, NO_PROXY, SSL_CERT_FILE
                       proxies and CA certificates for model servers
  SSL_VERIFY           false turns certificate checks off; a file path is the
                       CA bundle (as litellm reads it)

`picochat COMMAND --help` explains a command; `picochat paths` shows where
picochat keeps its files.
"""


def _help(about: str, examples: str) -> dict[str, Any]:
    """A command's `description` and its `examples:` epilog, as written."""
    return {"description": dedent(about).strip(),
            "epilog": "examples:\n" + indent(dedent(examples).strip("\n"), "  ")}


def build_parser(commands: bool = True) -> argparse.ArgumentParser:
    """picochat's parser; without its `commands` (5 ms of building) it parses only an empty
    command line, the chat app's, to the same namespace."""
    from picochat import __version__

    common = _Parser(add_help=False)
    common.add_argument("--data-dir", metavar="DIR", default=argparse.SUPPRESS,
                        help="folder for the database and log (env PICOCHAT_DATA_DIR)")
    common.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                        help="config file (env PICOCHAT_CONFIG_DIR names its folder)")
    common.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="write DEBUG lines to the log (env PICOCHAT_LOG_LEVEL)")
    session = _Parser(add_help=False)
    session.add_argument("-s", "--session", metavar="S", default=argparse.SUPPRESS,
                         help="session id or name (default: the current session, the most "
                              "recently active: written to, or shown in the app)")
    app_session = _Parser(add_help=False)
    app_session.add_argument("-s", "--session", metavar="S", default=argparse.SUPPRESS,
                             help="session id or name (default: the current session, the most "
                                  "recently active: written to, or shown in the app)")
    model = _Parser(add_help=False)
    model.add_argument("-m", "--model", metavar="M", default=argparse.SUPPRESS,
                       help="a [models] key or a litellm model string, or 'offline'")
    as_json = _Parser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print JSON")

    parser = _Parser(prog="picochat", parents=[common, app_session, model],
                     description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"picochat {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser,
                                title="commands")
    if not commands:
        return parser

    p = sub.add_parser("ask", parents=[common, session, model, as_json],
                       help="one turn without the app; the answer streams to stdout",
                       **_help("""
        Send one message to the session's model and stream the answer to stdout;
        notes and errors go to stderr. The turn is saved as one in the app is.
        The message is the words given, else stdin when it is a pipe or a file
        (or with -). A session named with -s is created if there is none.
        """, """
          picochat ask what is a monad
          picochat ask -s work -m openai/gpt-4o-mini "draft the release notes"
          git diff | picochat ask -s review
          picochat ask - < question.txt
          picochat ask --json hello | jq -r .reply
          picochat ask -- -v means what?     (-- before words that start with -)
        """))
    p.add_argument("text", metavar="TEXT", nargs="*",
                   help="your message; several words are joined with spaces; - reads stdin")
    p = sub.add_parser("compact", parents=[common, session, model, as_json],
                       help="compact the session's context now (/compact)", **_help("""
        Fold the older turns of the session's context into a summary now, as
        /compact does in the app. The raw history is never changed; --undo makes
        the previous checkpoint (or the raw history) the context again.
        """, """
          picochat compact
          picochat compact -s work --focus "the database migration"
          picochat compact --all
          picochat compact --preview
          picochat compact --undo
        """))
    p.add_argument("--focus", metavar="TEXT", help="what the summary should keep in focus")
    p.add_argument("--all", action="store_true",
                   help="fold all but the newest turn, however many tokens "
                        "keep_recent_tokens would keep raw (/compact all)")
    p.add_argument("--preview", action="store_true",
                   help="show what a compaction would fold, the summary, the facts it keeps "
                        "and the quality gate's verdict, and write nothing")
    p.add_argument("--undo", action="store_true",
                   help="undo the last compaction: the previous checkpoint becomes active again")
    sub.add_parser("info", parents=[common, session, model, as_json],
                   help="context usage of the session (/info)", **_help("""
        How much of the model's window the session's context uses, as /info
        shows it: the window, the reserve, when compaction starts and the active
        checkpoint. The model is named, not called: no key or network needed.
        """, """
          picochat info
          picochat info -s work -m ollama/llama3.2 --json
        """))
    sub.add_parser("clear", parents=[common, session],
                   help="start the context afresh; raw history is kept (/clear)", **_help("""
        Start the session's context afresh, as /clear does: the next turn sends
        none of the earlier messages. The raw history is kept; `picochat history`
        shows it.
        """, """
          picochat clear -s work
        """))
    p = sub.add_parser("pin", parents=[common, session, model],
                       help="keep a statement verbatim in every request (/pin)", **_help("""
        Pin a statement: from now on it goes to the model word for word in every
        request of the session, before any summary. It is never summarized and never
        dropped, however long the chat grows, until `picochat unpin N`. Pins together
        may take a tenth of the compaction threshold. A session named with -s is
        created if there is none.
        """, """
          picochat pin "Always answer in British English"
          picochat pin -s work "Our Redis runs on port 6380, not 6379"
          picochat pin --message 12          (message 12 of the session, as it is)
          picochat pin - < rules.txt
        """))
    p.add_argument("text", metavar="TEXT", nargs="*",
                   help="the statement; several words are joined with spaces; - reads stdin")
    p.add_argument("--message", metavar="SEQ", type=_number,
                   help="pin message SEQ of the session (yours or an answer) instead")
    sub.add_parser("pins", parents=[common, session, model, as_json],
                   help="list the session's pins and what they cost (/pins)", **_help("""
        List the session's pins, numbered as `picochat unpin` takes them, with the
        tokens each adds to every request and the pins' cap.
        """, """
          picochat pins
          picochat pins -s work --json | jq -r '.pins[].text'
        """))
    p = sub.add_parser("unpin", parents=[common, session],
                       help="remove a pin by its number (/unpin N)", **_help("""
        Remove pin N (as `picochat pins` numbers it): the next request no longer
        carries it. The numbers of the other pins stay as they are.
        """, """
          picochat unpin 2
          picochat unpin -s work 1
        """))
    p.add_argument("number", metavar="N", type=_number, help="the pin's number")
    p = sub.add_parser("sessions", parents=[common, as_json], help="list sessions", **_help("""
        List the sessions, the most recently active first: name, id, number of
        messages, model.
        """, """
          picochat sessions
          picochat sessions --json | jq -r '.[].name'
        """))
    p.add_argument("--names", action="store_true", help=argparse.SUPPRESS)  # for completion
    p = sub.add_parser("history", parents=[common, session, as_json],
                       help="the session's raw log, all of it", **_help("""
        Print every message of the branch in use (or --branch N) as it was sent or
        received, compacted or not, marking where the context the model sees starts.
        """, """
          picochat history -s work | less
          picochat history --branch 0
          picochat history --json | jq '.messages | length'
        """))
    p.add_argument("--branch", type=_number, metavar="N",
                   help="read branch N (`picochat branches` lists them)")
    sub.add_parser("branches", parents=[common, session, as_json],
                   help="the session's branches", **_help("""
        List the session's branches: where each leaves the one before it, the
        turns written on it, its first message, and which is in use. In the app,
        e on an earlier message of yours starts one, and ctrl+b switches.
        """, """
          picochat branches -s work
          picochat branches --json | jq '.[] | select(.current)'
        """))
    p = sub.add_parser("fork", parents=[common, session, as_json],
                       help="a new session from this one's context", **_help("""
        Make a new session that starts with the session's context after one of
        its messages (--at SEQ; else its newest): its summary, ledger and pins,
        and the messages after the summary. The source stays as it was, and no
        message is copied. The new session becomes the most recently active.
        """, """
          picochat fork -s work try-postgres
          picochat fork -s work --at 12 before-the-migration
          picochat fork --json | jq -r .session_id
        """))
    p.add_argument("--at", type=_number, metavar="SEQ",
                   help="fork after message SEQ, the end of a turn "
                        "(`picochat history` numbers them)")
    p.add_argument("name", nargs="?", metavar="NAME",
                   help="the new session's name (default: SOURCE-fork)")
    sub.add_parser("checkpoints", parents=[common, session, as_json],
                   help="every checkpoint of the session, newest first", **_help("""
        List the session's checkpoints (the summaries compaction wrote), newest
        first, marking the active one, with the tokens before and after each.
        """, """
          picochat checkpoints
          picochat checkpoints -s work --json
        """))
    p = sub.add_parser("export", parents=[common, session], help="export a session", **_help("""
        Write a whole session, as Markdown or JSON, to stdout or to a file (-o).
        A file is written whole or not at all; picochat's own files are refused.
        """, """
          picochat export --format md -o chat.md
          picochat export -s work --format json | jq '.messages | length'
        """))
    p.add_argument("--format", required=True, choices=("md", "json"), help="md or json")
    p.add_argument("--all-branches", action="store_true",
                   help="every branch, each whole, not only the one in use")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p = sub.add_parser("config", parents=[common], help="config file: path, show, init",
                       **_help("""
        The config file (TOML). Without one, the built-in defaults apply.

        actions:
          path   print where the config file is, or would be
          show   print the config in force, defaults included, as TOML
          init   write a starter file that explains every key (--force: replace)
        With init --model, the file also sets that model up as [models.NAME] and
        makes it the default_model: a working file in one step.
        """, """
          picochat config init
          picochat config init --model anthropic/claude-sonnet-4-5
          picochat config init -m openai/qwen --api-base http://127.0.0.1:8080/v1
          $EDITOR "$(picochat config path)"
          picochat config show --config ./project.toml
        """))
    p.add_argument("action", choices=("path", "show", "init"), help="path, show or init")
    p.add_argument("--force", action="store_true", help="with init: replace an existing file")
    p.add_argument("-m", "--model", dest="init_model", metavar="MODEL", default=argparse.SUPPRESS,
                   help="with init: the litellm model string to set up and make the default")
    p.add_argument("--api-base", metavar="URL", default=argparse.SUPPRESS,
                   help="with init --model: the server's URL (a local server or a proxy)")
    p.add_argument("--token-limit", metavar="N", type=int, default=argparse.SUPPRESS,
                   help="with init --model: the model's context window in tokens")
    p.add_argument("--name", metavar="NAME", default=argparse.SUPPRESS,
                   help="with init --model: its [models.NAME] (default: local for a server "
                        "at --api-base, else the model's name)")
    sub.add_parser("paths", parents=[common, as_json],
                   help="where the config, database, log and themes are", **_help("""
        Print where picochat keeps its files, one a line: the config file, the
        database, the log and the folder for your own themes. Nothing is created.
        --data-dir, --config, PICOCHAT_DATA_DIR and PICOCHAT_CONFIG_DIR move them.
        """, """
          picochat paths
          tail "$(picochat paths --json | jq -r .log)"
        """))
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh, fish)",
                       **_help("""
        Print a completion script for your shell: commands, flags, and session names
        after -s.
        """, """
          bash:  echo 'source <(picochat completion bash)' >> ~/.bashrc
          zsh:   echo 'source <(picochat completion zsh)' >> ~/.zshrc  (after compinit)
          fish:  picochat completion fish > ~/.config/fish/completions/picochat.fish
        """))
    p.add_argument("shell", choices=SHELLS, help="bash, zsh or fish")
    return parser
