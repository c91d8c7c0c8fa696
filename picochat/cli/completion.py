"""Shell completion scripts for bash, zsh and fish, written out from the argparse parser itself:
a command or flag added to the parser is completed without touching this file.

What a flag's value completes to is decided by its name (`--session`: the session names, which
the hidden `picochat sessions --names` prints; `--config`, `--output`: files; `--data-dir`: a
folder), or by its choices (`--format`, `config ACTION`, `completion SHELL`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

SESSIONS, FILE, DIR, CHOICE, TEXT = "sessions", "file", "dir", "choice", "text"
_VALUE_KINDS = {"session": SESSIONS, "config": FILE, "output": FILE, "data_dir": DIR}
NAMES_COMMAND = "picochat sessions --names 2>/dev/null"


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]           # ("-s", "--session")
    help: str
    value: str | None                # None: a switch; else one of the kinds above
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Command:
    name: str                        # "" for picochat itself
    help: str
    options: tuple[Option, ...]
    words: tuple[str, ...]           # what its positional argument may be (config's actions)
    free_text: bool                  # takes free words (ask's message)


def commands(parser: argparse.ArgumentParser) -> tuple[Command, ...]:
    """picochat itself (name "") and each subcommand, as the parser defines them."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    top = _command("", parser.description or "", parser)
    return (top, *(_command(name, helps.get(name, ""), p) for name, p in sub.choices.items()))


def _command(name: str, help: str, parser: argparse.ArgumentParser) -> Command:
    options, words, free = [], (), False
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        if not action.option_strings:
            words = tuple(action.choices or ())
            free = free or not action.choices
            continue
        value = None
        if action.nargs != 0:
            value = CHOICE if action.choices else _VALUE_KINDS.get(action.dest, TEXT)
        options.append(Option(tuple(action.option_strings), _one_line(action.help or ""), value,
                              tuple(action.choices or ())))
    return Command(name, _one_line(help), tuple(options), words, free)


def _one_line(text: str) -> str:
    return " ".join(text.split()).split(". ")[0]


def value_options(cmds: tuple[Command, ...]) -> dict[str, Option]:
    """Every flag that takes a value, by flag; a flag means the same in every command."""
    found: dict[str, Option] = {}
    for cmd in cmds:
        for option in cmd.options:
            for flag in option.flags if option.value else ():
                if flag in found and (found[flag].value, found[flag].choices) != (
                        option.value, option.choices):
                    raise ValueError(f"{flag} takes different values in different commands")
                found[flag] = option
    return found


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    return {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}[shell](commands(parser))


# --- bash --------------------------------------------------------------------------------------


def bash_script(cmds: tuple[Command, ...]) -> str:
    top = cmds[0]
    top_values = "|".join(f for o in top.options if o.value for f in o.flags)
    lines = [
        "# picochat completion for bash: source <(picochat completion bash)",
        "_picochat_complete() {",
        '    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}',
        '    local command="" i',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        case ${COMP_WORDS[i]} in',
        f"            {top_values}) ((i++)) ;;",
        "            -*) ;;",
        '            *) command=${COMP_WORDS[i]}; break ;;',
        "        esac",
        "    done",
        "    local IFS=$'\\n'",
        "    case $prev in",
    ]
    by_kind: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for flag, option in value_options(cmds).items():
        by_kind.setdefault((option.value or TEXT, option.choices), []).append(flag)
    for (kind, choices), flags in by_kind.items():
        reply = {
            # read, not `compgen -W`: that would expand a name's $(...) and split its spaces
            SESSIONS: ('local name; while IFS= read -r name; do [[ $name == "$cur"* ]] && '
                       "COMPREPLY+=(\"$(printf '%q' \"$name\")\"); "
                       f"done < <({NAMES_COMMAND})"),
            FILE: 'compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur"))',
            DIR: 'compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- "$cur"))',
            CHOICE: f'COMPREPLY=($(compgen -W {_bash_words(choices)} -- "$cur"))',
            TEXT: "COMPREPLY=()",
        }[kind]
        lines.append(f"        {'|'.join(flags)}) {reply}; return ;;")
    lines += ["    esac", "    local options words", "    case $command in"]
    for cmd in cmds:
        flags = [f for o in cmd.options for f in o.flags]
        words = [c.name for c in cmds[1:]] if not cmd.name else list(cmd.words)
        pattern = cmd.name or "''"
        lines.append(f"        {pattern}) options={_bash_words(flags)}; "
                     f"words={_bash_words(words)} ;;")
    lines += [
        "        *) return ;;",
        "    esac",
        '    if [[ $cur == -* ]]; then',
        '        COMPREPLY=($(compgen -W "$options" -- "$cur"))',
        "    else",
        '        COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "    fi",
        "}",
        "complete -F _picochat_complete picochat",
    ]
    return "\n".join(lines) + "\n"


def _bash_words(words: list[str] | tuple[str, ...]) -> str:
    """A $'...' word list, one a line (IFS is a newline where it is used)."""
    return "$'" + "\\n".join(w.replace("\\", "\\\\").replace("'", "\\'") for w in words) + "'"


# --- zsh ---------------------------------------------------------------------------------------


def zsh_script(cmds: tuple[Command, ...]) -> str:
    top = cmds[0]
    lines = [
        "#compdef picochat",
        "# picochat completion for zsh: source <(picochat completion zsh) after compinit,",
        "# or save it as _picochat in a folder of $fpath.",
        "",
        "_picochat_sessions() {",
        "    local -a names",
        f'    names=(${{(f)"$({NAMES_COMMAND})"}})',
        "    compadd -a names",
        "}",
        "",
        "_picochat() {",
        "    local curcontext=$curcontext state line ret=1",
        "    typeset -A opt_args",
        "    local -a commands",
        "    commands=(",
        *(f"        {_zsh_quote(c.name + ':' + c.help)}" for c in cmds[1:]),
        "    )",
        "    _arguments -C \\",
        *(f"        {spec} \\" for spec in _zsh_specs(top)),
        "        '1: :->command' \\",
        "        '*:: :->args' && ret=0",
        "    case $state in",
        "        command) _describe -t commands 'picochat command' commands && ret=0 ;;",
        "        args)",
        "            curcontext=${curcontext%:*:*}:picochat-$words[1]:",
        "            case $words[1] in",
    ]
    for cmd in cmds[1:]:
        specs = _zsh_specs(cmd)
        if cmd.words:
            specs.append(_zsh_quote(f"1:{cmd.name}:({' '.join(cmd.words)})"))
        elif cmd.free_text:
            specs.append("'*:message: '")
        lines.append(f"                {cmd.name}) _arguments \\")
        lines += [f"                    {spec} \\" for spec in specs[:-1]]
        lines.append(f"                    {specs[-1]} && ret=0 ;;")
    lines += [
        "            esac ;;",
        "    esac",
        "    return ret",
        "}",
        "",
        "if [[ $zsh_eval_context[-1] == loadautofunc ]]; then",
        '    _picochat "$@"',
        "else",
        "    compdef _picochat picochat",
        "fi",
    ]
    return "\n".join(lines) + "\n"


def _zsh_specs(cmd: Command) -> list[str]:
    specs = []
    for option in cmd.options:
        about = option.help.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")
        action = ""
        if option.value:
            name = option.flags[-1].lstrip("-")
            action = ":" + name + ":" + {
                SESSIONS: "_picochat_sessions", FILE: "_files", DIR: "_files -/",
                CHOICE: f"({' '.join(option.choices)})", TEXT: " "}[option.value]
        if len(option.flags) == 1:
            specs.append(_zsh_quote(f"{option.flags[0]}[{about}]{action}"))
        else:
            exclusive = _zsh_quote(f"({' '.join(option.flags)})")
            flags = "{" + ",".join(option.flags) + "}"
            specs.append(f"{exclusive}{flags}{_zsh_quote(f'[{about}]{action}')}")
    return specs


def _zsh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# --- fish --------------------------------------------------------------------------------------


def fish_script(cmds: tuple[Command, ...]) -> str:
    names = " ".join(c.name for c in cmds[1:])
    lines = [
        "# picochat completion for fish:",
        "#   picochat completion fish > ~/.config/fish/completions/picochat.fish",
        "function __picochat_sessions",
        f"    {NAMES_COMMAND}",
        "end",
        "complete -c picochat -f",
    ]
    none_yet = f"not __fish_seen_subcommand_from {names}"
    for cmd in cmds[1:]:
        lines.append(f"complete -c picochat -n {_fish_quote(none_yet)} -a {cmd.name} "
                     f"-d {_fish_quote(cmd.help)}")
    for cmd in cmds:
        when = _fish_quote(f"__fish_seen_subcommand_from {cmd.name}" if cmd.name else none_yet)
        for option in cmd.options:
            flags = " ".join(f"-s {f[1:]}" if not f.startswith("--") else f"-l {f[2:]}"
                             for f in option.flags)
            value = {
                None: "", SESSIONS: " -x -a '(__picochat_sessions)'", FILE: " -r -F",
                DIR: " -x -a '(__fish_complete_directories)'",
                CHOICE: " -x -a " + _fish_quote(" ".join(option.choices)), TEXT: " -x",
            }[option.value]
            lines.append(f"complete -c picochat -n {when} {flags}{value} "
                         f"-d {_fish_quote(option.help)}")
        if cmd.words:
            lines.append(f"complete -c picochat -n {when} -a {_fish_quote(' '.join(cmd.words))}")
    return "\n".join(lines) + "\n"


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
