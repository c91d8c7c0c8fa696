"""litellm's bundled model map (windows, output limits, providers), read as JSON: importing
litellm costs about 2 s, reading its file a few milliseconds."""

from __future__ import annotations

import importlib.util
import json
from functools import lru_cache
from pathlib import Path
from typing import Any


@lru_cache(maxsize=1)
def model_map() -> dict[str, Any]:
    spec = importlib.util.find_spec("litellm")
    if not spec or not spec.submodule_search_locations:
        return {}
    path = Path(list(spec.submodule_search_locations)[0]) / \
        "model_prices_and_context_window_backup.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def entry(model: str) -> dict[str, Any] | None:
    """The map's entry for `model`, tried with and without its provider prefix."""
    table = model_map()
    for key in (model, model.split("/", 1)[1] if "/" in model else None):
        info = table.get(key) if key else None
        if isinstance(info, dict):
            return info
    return None


def max_output_tokens(model: str) -> int | None:
    """The most tokens the model may write in one answer, when the map knows it."""
    value = (entry(model) or {}).get("max_output_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None
