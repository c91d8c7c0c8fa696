"""The config file: read with tomllib, validated into frozen values, written by `config init`
(and edited in place, one line, by the TUI's `/theme`).

Every problem is one `ConfigError` line naming the file, the key and, where it helps, the line
and column, and listing the valid choices when there are few. A missing file is not an error.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from picochat.errors import ConfigError

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
BUILTIN_TOOLS = ("history_search", "timeline_recall", "read_file")
DEFAULT_THEME = "picochat-dark"
MAX_CONFIG_BYTES = 1 << 20  # a config (or a theme) is a few KB; /dev/zero must not be read on


@dataclass(frozen=True)
class ModelConfig:
    """A `[models.NAME]` entry: a litellm model string plus how to reach it."""

    name: str
    model: str
    api_base: str | None = None
    api_key_env: str | None = None
    token_limit: int | None = None
    timeout: float | None = None  # seconds one whole provider call may take


@dataclass(frozen=True)
class AgentConfig:
    """An `[agents.NAME]` entry: a model, a system prompt and an optional tighter window."""

    name: str
    model: str | None = None
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    token_limit: int | None = None


TOP_LEVEL_KEYS = ("default_model", "models", "agents", "context_compaction", "tools", "ui")


@dataclass(frozen=True)
class CompactionConfig:
    enabled: bool = True
    reserve_tokens: int = 16384
    keep_recent_tokens: int = 20000
    instructions: str = ""
    summary_model: str | None = None  # None: the chat model writes the summaries
    preview: bool = False  # the app shows each automatic compaction to approve first


@dataclass(frozen=True)
class ToolsConfig:
    enabled: tuple[str, ...] = BUILTIN_TOOLS
    roots: tuple[Path, ...] = ()  # the folders read_file may read; () the start folder


@dataclass(frozen=True)
class UiConfig:
    theme: str = DEFAULT_THEME


@dataclass(frozen=True)
class Config:
    default_model: str | None = None
    models: Mapping[str, ModelConfig] = field(default_factory=dict)
    agents: Mapping[str, AgentConfig] = field(default_factory=dict)
    context_compaction: CompactionConfig = CompactionConfig()
    tools: ToolsConfig = ToolsConfig()
    ui: UiConfig = UiConfig()
    source: Path | None = None

    @property
    def agent(self) -> AgentConfig:
        """The agent every session uses: `[agents.default]`, else the built-in one."""
        return self.agents.get("default") or AgentConfig(name="default")


# --- loading -----------------------------------------------------------------------------------


def load_config(path: Path) -> Config:
    """Read and validate `path`; a missing file gives the defaults.

    The `--model` flag and `PICOCHAT_MODEL` are applied by model resolution, not here, since
    they outrank a session's own model while `default_model` does not.
    """
    return _parse_config(path, _read_config_text(path))[1]


def load_config_text(text: str, path: Path) -> Config:
    """`text`, as the file at `path` would load (a file about to be written, checked first)."""
    return _parse_config(path, text)[1]


class FileRefused(Exception):
    """A file picochat will not read (a FIFO, a device, too large); the text says why."""


def read_small_file(path: Path, limit: int = MAX_CONFIG_BYTES) -> bytes:
    """The bytes of `path`, a regular file (a symlink to one is fine) of at most `limit` bytes.
    A FIFO would block start-up and a device may never end, so neither is read: FileRefused.
    OSError (FileNotFoundError, IsADirectoryError, ...) as `open` raises it."""
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(f"{path}: is a directory")
    if not stat.S_ISREG(mode):
        raise FileRefused(f"not a regular file ({_file_kind(mode)})")
    # O_NONBLOCK: should it have become a FIFO since the stat, opening it does not wait.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileRefused("not a regular file")
        data = bytearray()
        while len(data) <= limit:
            chunk = os.read(fd, limit + 1 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FileRefused(f"larger than {limit >> 20} MiB")
    return bytes(data)


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a file")


def _read_config_text(path: Path, *, exact: bool = False) -> str | None:
    """The file's text, None if there is none; `exact` keeps its line endings as stored."""
    try:
        text = read_small_file(path).decode("utf-8")
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file",
                          "pass a file to --config") from None
    except FileRefused as exc:
        raise ConfigError(f"{path}: {exc}; not read",
                          f"a config is a regular file of at most {MAX_CONFIG_BYTES >> 20} MiB"
                          ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})", "save it as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from None
    return text if exact else text.replace("\r\n", "\n").replace("\r", "\n")  # as open() would


def _parse_config(path: Path, text: str | None) -> tuple[dict[str, Any], Config]:
    """The parsed TOML of `text` (None: no file) and the `Config` it validates into."""
    data: dict[str, Any] = {}
    if text is not None:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML: {_toml_message(exc)}") from None
        except RecursionError:  # tomllib recurses once per level of [ or {
            raise ConfigError(f"{path}: invalid TOML: nested too deeply",
                              "a config needs only a few levels") from None
    return data, _Validator(path, text or "", exists=text is not None).config(data)


def _toml_message(exc: tomllib.TOMLDecodeError) -> str:
    """tomllib says '... (at line 3, column 7)'; keep that, turn it into our shape."""
    msg = str(exc)
    m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
    if m:
        return f"{msg[: m.start()].strip()} at line {m.group(1)}, column {m.group(2)}"
    m = re.search(r"\(at end of document\)", msg)
    if m:
        return f"{msg[: m.start()].strip()} at end of file"
    return msg


_TABLE_HEADER = re.compile(r"^\s*\[\s*([^\]]+?)\s*\]\s*(#.*)?$")


def _table_name(line: str) -> str | None:
    """`models.x` for a `[models.x]` header line (quotes and spaces dropped), else None."""
    m = _TABLE_HEADER.match(line)
    return m.group(1).replace('"', "").replace("'", "").replace(" ", "") if m else None


class _Validator:
    """Turns parsed TOML into a `Config`, or one precise `ConfigError`."""

    def __init__(self, path: Path, text: str, exists: bool = True) -> None:
        self.path = path
        self.lines = text.splitlines()
        self.exists = exists

    def fail(self, table: str, key: str, problem: str, hint: str | None = None) -> ConfigError:
        where = f"{table}.{key}" if table else key
        line = self._line_of(table, key)
        at = f" (line {line})" if line else ""
        return ConfigError(f"{self.path}: {where}{at}: {problem}", hint)

    def _line_of(self, table: str, key: str) -> int | None:
        """Best effort: the line where `key` is set inside `[table]`."""
        current = ""
        setting = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
        for number, raw in enumerate(self.lines, start=1):
            name = _table_name(raw)
            if name is not None:
                current = name
                if table and current == f"{table}.{key}":
                    return number
                continue
            if current == table and setting.match(raw):
                return number
        return None

    # The top level ------------------------------------------------------------------------------

    def config(self, data: dict[str, Any]) -> Config:
        self.unknown_keys("", data, TOP_LEVEL_KEYS)
        default_model = self.opt_str("", data, "default_model")
        models = {
            name: self.model(name, entry)
            for name, entry in self.table("", data, "models").items()
        }
        agents = {
            name: self.agent(name, entry)
            for name, entry in self.table("", data, "agents").items()
        }
        return Config(
            default_model=default_model,
            models=models,
            agents=agents,
            context_compaction=self.compaction(self.table("", data, "context_compaction")),
            tools=self.tools(self.table("", data, "tools")),
            ui=self.ui(self.table("", data, "ui")),
            source=self.path if self.exists else None,
        )

    def model(self, name: str, entry: Any) -> ModelConfig:
        table = f"models.{name}"
        if not isinstance(entry, dict):
            raise self.fail("models", name, "must be a table like [models.NAME]")
        self.unknown_keys(table, entry,
                          ("model", "api_base", "api_key_env", "token_limit", "timeout"))
        model = self.opt_str(table, entry, "model")
        if not model:
            raise self.fail(table, "model", "missing",
                            'set it to a litellm model string such as "openai/gpt-4o-mini"')
        return ModelConfig(
            name=name,
            model=model,
            api_base=self.opt_str(table, entry, "api_base"),
            api_key_env=self.opt_str(table, entry, "api_key_env"),
            token_limit=self.opt_int(table, entry, "token_limit", minimum=1),
            timeout=self.opt_seconds(table, entry, "timeout"),
        )

    def agent(self, name: str, entry: Any) -> AgentConfig:
        table = f"agents.{name}"
        if not isinstance(entry, dict):
            raise self.fail("agents", name, "must be a table like [agents.NAME]")
        self.unknown_keys(table, entry, ("model", "system_prompt", "token_limit"))
        prompt = self.opt_str(table, entry, "system_prompt")
        return AgentConfig(
            name=name,
            model=self.opt_str(table, entry, "model"),
            system_prompt=DEFAULT_SYSTEM_PROMPT if prompt is None else prompt,
            token_limit=self.opt_int(table, entry, "token_limit", minimum=1),
        )

    def compaction(self, entry: dict[str, Any]) -> CompactionConfig:
        table = "context_compaction"
        self.unknown_keys(table, entry, ("enabled", "reserve_tokens", "keep_recent_tokens",
                                         "instructions", "summary_model", "preview"))
        d = CompactionConfig()
        enabled, preview = (entry.get(k, getattr(d, k)) for k in ("enabled", "preview"))
        for key, value in (("enabled", enabled), ("preview", preview)):
            if not isinstance(value, bool):
                raise self.fail(table, key, f"expected true or false, got {_show(value)}")
        reserve = self.opt_int(table, entry, "reserve_tokens", minimum=0)
        keep = self.opt_int(table, entry, "keep_recent_tokens", minimum=0)
        instructions = self.opt_str(table, entry, "instructions")
        summary_model = self.opt_str(table, entry, "summary_model")
        if summary_model is not None and not summary_model.strip():
            raise self.fail(table, "summary_model", "is empty",
                            'name a [models] key, a litellm model string or "offline", '
                            "or remove the line to summarize with the chat model")
        return CompactionConfig(
            enabled=enabled,
            reserve_tokens=d.reserve_tokens if reserve is None else reserve,
            keep_recent_tokens=d.keep_recent_tokens if keep is None else keep,
            instructions=instructions or "",
            summary_model=summary_model,
            preview=preview,
        )

    def tools(self, entry: dict[str, Any]) -> ToolsConfig:
        self.unknown_keys("tools", entry, ("enabled", "roots"))
        roots = self.roots(entry.get("roots", []))
        if "enabled" not in entry:
            return ToolsConfig(roots=roots)
        enabled = entry["enabled"]
        if not isinstance(enabled, list) or not all(isinstance(t, str) for t in enabled):
            raise self.fail("tools", "enabled", f"expected a list of tool names, got {_show(enabled)}",
                            "valid: " + ", ".join(BUILTIN_TOOLS))
        for tool in enabled:
            if tool not in BUILTIN_TOOLS:
                raise self.fail("tools", "enabled", f"unknown tool {tool!r}",
                                "valid: " + ", ".join(BUILTIN_TOOLS))
        return ToolsConfig(enabled=tuple(dict.fromkeys(enabled)), roots=roots)

    def roots(self, value: Any) -> tuple[Path, ...]:
        """`[tools] roots`: folders that exist, given absolute or from `~`."""
        if not isinstance(value, list) or not all(isinstance(r, str) for r in value):
            raise self.fail("tools", "roots", f"expected a list of folders, got {_show(value)}",
                            'e.g. roots = ["~/src/project"]')
        out = []
        for root in value:
            path = Path(root).expanduser()
            if not path.is_absolute():
                raise self.fail("tools", "roots", f"{root!r} is not an absolute path",
                                "give it from / or ~")
            if not path.is_dir():
                raise self.fail("tools", "roots", f"{root!r} is not a folder",
                                "name a folder that exists")
            out.append(path)
        return tuple(dict.fromkeys(out))

    def ui(self, entry: dict[str, Any]) -> UiConfig:
        self.unknown_keys("ui", entry, ("theme",))
        theme = self.opt_str("ui", entry, "theme")
        return UiConfig(theme=theme or DEFAULT_THEME)

    # Field helpers -------------------------------------------------------------------------------

    def unknown_keys(self, table: str, entry: dict[str, Any], known: tuple[str, ...]) -> None:
        for key in entry:
            if key not in known:
                if table and key in TOP_LEVEL_KEYS:  # appended at the end of a file: TOML
                    raise self.fail(table, key, "unknown key", (  # put it in the last table
                        f"{key} belongs at the top of the file, above the first [table] "
                        f"line; in [{table}] the valid keys are: " + ", ".join(known)))
                raise self.fail(table, key, "unknown key", "valid: " + ", ".join(known))

    def table(self, table: str, entry: dict[str, Any], key: str) -> dict[str, Any]:
        value = entry.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(table, key, f"expected a table [{key}], got {_show(value)}")
        return value

    def opt_str(self, table: str, entry: dict[str, Any], key: str) -> str | None:
        value = entry.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(table, key, f"expected a string, got {_show(value)}")
        return value

    def opt_int(self, table: str, entry: dict[str, Any], key: str, *, minimum: int) -> int | None:
        value = entry.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(table, key, f"expected a whole number, got {_show(value)}")
        if value < minimum:
            need = "positive" if minimum == 1 else f"at least {minimum}"
            raise self.fail(table, key, f"must be {need}, got {value}")
        return value


    def opt_seconds(self, table: str, entry: dict[str, Any], key: str) -> float | None:
        value = entry.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(table, key, f"expected a number of seconds, got {_show(value)}")
        if not value > 0 or value == float("inf"):
            raise self.fail(table, key, f"must be a positive number of seconds, got {value}")
        return float(value)


def _show(value: Any) -> str:
    kind = {bool: "a boolean", str: "a string", int: "a number", float: "a number",
            list: "a list", dict: "a table"}.get(type(value), type(value).__name__)
    text = repr(value)
    return f"{kind} ({text[:40]})" if not isinstance(value, (dict, list)) else kind


def config_changes(old: Config, new: Config) -> list[str]:
    """What `/reload` applies, one "key: old → new" each, in the file's words."""
    def flat(config: Config) -> dict[str, Any]:
        out: dict[str, Any] = {"default_model": config.default_model}
        for table in ("context_compaction", "tools", "ui"):
            for key, value in vars(getattr(config, table)).items():
                out[f"{table}.{key}"] = value
        for group in ("models", "agents"):
            for name, entry in getattr(config, group).items():
                for key, value in vars(entry).items():
                    if key != "name":
                        out[f"{group}.{name}.{key}"] = value
        return out

    def said(value: Any) -> str:  # as TOML writes it: true, "text", ["a", "b"]
        if value is None:
            return "(unset)"
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (tuple, list)):
            return "[" + ", ".join(said(item) for item in value) + "]"
        return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else str(value)

    before, after = flat(old), flat(new)
    return [f"{key}: {said(before.get(key))} → {said(after.get(key))}"
            for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)]


# --- writing -----------------------------------------------------------------------------------

def effective_config_text(config: Config) -> str:
    """`config show`: the config in force, defaults included, as TOML."""
    import tomli_w

    def drop_none(entry: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in entry.items() if v is not None and k != "name"}

    body: dict[str, Any] = {}
    if config.default_model:
        body["default_model"] = config.default_model
    if config.models:
        body["models"] = {n: drop_none(vars(m)) for n, m in config.models.items()}
    if config.agents:
        body["agents"] = {n: drop_none(vars(a)) for n, a in config.agents.items()}
    body["context_compaction"] = drop_none(vars(config.context_compaction))
    body["tools"] = {"enabled": list(config.tools.enabled)}
    if config.tools.roots:
        body["tools"]["roots"] = [str(r) for r in config.tools.roots]
    body["ui"] = {"theme": config.ui.theme}
    source = str(config.source) if config.source else "built-in defaults (no config file)"
    return f"# source: {source}\n" + tomli_w.dumps(body)


def save_ui_theme(path: Path, theme: str) -> None:
    """Remember the app's theme: set `[ui] theme` in the config file and change nothing else
    (comments, order and line endings are kept). A file that is invalid, or whose theme cannot
    be set in place (an inline `ui = {...}`, a dotted `ui.theme`), raises ConfigError and is
    left as it was."""
    import tomli_w

    from picochat.fsutil import atomic_write_text

    setting = tomli_w.dumps({"theme": theme}).rstrip("\n")  # tomli-w gets the quoting right
    old = _read_config_text(path, exact=True)
    data, _ = _parse_config(path, old)  # an invalid file raises ConfigError: never overwrite it
    new = _with_theme(old or "", setting)
    wanted = {**data, "ui": {**data.get("ui", {}), "theme": theme}}
    try:
        in_place = new is not None and tomllib.loads(new) == wanted
    except (tomllib.TOMLDecodeError, RecursionError):
        in_place = False
    if not in_place or _parse_config(path, new)[1].ui.theme != theme:
        raise ConfigError(f"{path}: cannot set ui.theme without rewriting the file; "
                          "nothing written", f"set {setting} under [ui] by hand")
    assert new is not None  # in place, so there was a text to write
    atomic_write_text(path, new)


_THEME_SETTING = re.compile(r"""^([ \t]*(?:theme|"theme"|'theme')[ \t]*=[ \t]*)(.*)$""")


def _with_theme(text: str, setting: str) -> str | None:
    """`text` with its `[ui]` theme set by `setting` (a `theme = VALUE` line), all else kept:
    the old value replaced in place, else the line put right under `[ui]`, else a `[ui]` table
    appended. None if the old value's end cannot be found. Line by line, so a best effort
    that `save_ui_theme` checks by parsing the result."""
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = re.findall(r"[^\n]*\n|[^\n]+\Z", text)
    ui_at: int | None = None
    for i, line in enumerate(lines):
        body = line.rstrip("\r\n")
        name = _table_name(body)
        if name is not None:
            if ui_at is not None:
                break  # the end of [ui]
            ui_at = i if name == "ui" else None
            continue
        m = _THEME_SETTING.match(body) if ui_at is not None else None
        if m:
            end = _value_end(m.group(2))
            if end is None:
                return None
            lines[i] = (m.group(1) + setting.partition(" = ")[2] + m.group(2)[end:]
                        + line[len(body):])
            return "".join(lines)
    if ui_at is not None:
        if not lines[ui_at].endswith("\n"):
            lines[ui_at] += newline
        lines.insert(ui_at + 1, setting + newline)
        return "".join(lines)
    if text and not text.endswith("\n"):
        text += newline
    return text + (newline if text else "") + "[ui]" + newline + setting + newline


def _value_end(rest: str) -> int | None:
    """Where the one-line TOML value that starts `rest` ends (a comment may follow it)."""
    for cut in [i for i, c in enumerate(rest) if c == "#"] + [len(rest)]:
        value = rest[:cut].rstrip(" \t")
        try:
            tomllib.loads(f"v = {value}")
        except tomllib.TOMLDecodeError:
            continue
        return len(value)
    return None
