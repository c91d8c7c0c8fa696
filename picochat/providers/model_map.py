"""litellm's bundled model map (windows, output limits, providers), read as JSON: importing
litellm costs about 2 s, reading its file a few milliseconds."""

from __future__ import annotations

import importlib.util
import json
from functools import lru_cache
from pathlib import Path
from typing import Any


@lru_cache(maxsize=1)
def _text() -> str:
    """The map's JSON text ("" when litellm or its file is missing)."""
    spec = importlib.util.find_spec("litellm")
    if not spec or not spec.submodule_search_locations:
        return ""
    path = Path(list(spec.submodule_search_locations)[0]) / \
        "model_prices_and_context_window_backup.json"
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        return ""


@lru_cache(maxsize=1)
def model_map() -> dict[str, Any]:
    try:
        table = json.loads(_text() or "{}")
    except ValueError:
        return {}
    return table if isinstance(table, dict) else {}


def entry(model: str) -> dict[str, Any] | None:
    """The map's entry for `model`, tried with and without its provider prefix. A name that
    is nowhere in the file as a key (a local server's model) is answered without parsing it:
    the parse is 30-60 ms on the first send's path."""
    names = [k for k in (model, model.split("/", 1)[1] if "/" in model else None) if k]
    text = _text()
    if not any(f"{json.dumps(name)}:" in text for name in names):
        return None
    table = model_map()
    for key in names:
        info = table.get(key)
        if isinstance(info, dict):
            return info
    return None


def max_output_tokens(model: str) -> int | None:
    """The most tokens the model may write in one answer, when the map knows it."""
    value = (entry(model) or {}).get("max_output_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None
