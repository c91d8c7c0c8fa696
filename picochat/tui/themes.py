"""picochat's themes: TOML files (Textual Theme fields) from the bundled `themes/` folder and
the user's `<config dir>/themes/`. A bad file is reported by name and key, never a crash."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from textual.app import App
from textual.theme import Theme

import picochat
from picochat.config import FileRefused, read_small_file, save_ui_theme
from picochat.errors import PicochatError
from picochat.paths import Paths

_FIELDS = {f.name: f.type for f in fields(Theme)}
_COLOURS = ("primary", "secondary", "warning", "error", "success", "accent", "foreground",
            "background", "surface", "panel", "boost")


@dataclass(frozen=True)
class ThemeProblem:
    path: Path
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def bundled_dir() -> Path:
    """In a wheel the themes sit inside the package; in a checkout beside it."""
    inside = Path(picochat.__file__).parent / "themes"
    return inside if inside.is_dir() else Path(picochat.__file__).parent.parent / "themes"


def load_theme(path: Path) -> Theme:
    """One theme file; raises ValueError naming the key and what to do."""
    from textual.color import Color, ColorParseError

    try:
        text = read_small_file(path).decode("utf-8")
        data = tomllib.loads(text.replace("\r\n", "\n").replace("\r", "\n"))
    except FileRefused as exc:  # a FIFO here would hang start-up
        raise ValueError(f"{exc}; not read") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the file ({exc.__class__.__name__})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not valid TOML ({exc})") from None
    except RecursionError:
        raise ValueError("not valid TOML (nested too deeply)") from None
    for key in data:
        if key not in _FIELDS or key == "ansi":
            raise ValueError(f"{key}: unknown key (valid: {', '.join(k for k in _FIELDS if k != 'ansi')})")
    for key in ("name", "primary"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise ValueError(f"{key}: missing; a theme needs a name and a primary colour")
    for key in _COLOURS:
        if key in data:
            try:
                Color.parse(data[key])
            except (ColorParseError, TypeError):
                raise ValueError(f"{key}: {data[key]!r} is not a colour (use e.g. \"#7aa2f7\")"
                                 ) from None
    if "dark" in data and not isinstance(data["dark"], bool):
        raise ValueError("dark: expected true or false")
    for key in ("luminosity_spread", "text_alpha"):
        if key in data and (isinstance(data[key], bool)
                            or not isinstance(data[key], (int, float))):
            raise ValueError(f"{key}: expected a number")
    if "variables" in data and not isinstance(data["variables"], dict):
        raise ValueError("variables: expected a table")
    return Theme(**data)


def load_themes(*folders: Path) -> tuple[list[Theme], list[ThemeProblem]]:
    """Every `*.toml` theme in `folders` (later folders override earlier names)."""
    themes: dict[str, Theme] = {}
    problems: list[ThemeProblem] = []
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.toml")):
            try:
                theme = load_theme(path)
            except ValueError as exc:
                problems.append(ThemeProblem(path, str(exc)))
                continue
            themes[theme.name] = theme
    return list(themes.values()), problems


def install_themes(app: App, folders: list[Path], wanted: str) -> list[str]:
    """Register the bundled and the user's themes on `app` and pick `wanted` (the config's
    `[ui] theme`); before the first frame, so the screen is styled once. Returns the problems
    to show, each a line naming the file or the setting, and the valid choices."""
    themes, problems = load_themes(*folders)
    notes = [f"theme not loaded: {problem}" for problem in problems]
    for theme in themes:
        app.register_theme(theme)
    if wanted in app.available_themes:
        app.theme = wanted
    else:
        notes.append(f"unknown theme {wanted!r} in [ui] theme; valid: "
                     + ", ".join(sorted(app.available_themes)))
    return notes


def save_theme(paths: Paths, name: str) -> str | None:
    """Remember `name` in the config file; None when it was saved, else why it was not."""
    try:
        save_ui_theme(paths.config_file, name)
    except PicochatError as exc:
        return exc.user_line()
    return None
