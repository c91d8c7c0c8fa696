"""How close picochat's estimate of a request comes to the count the provider would report.

For OpenAI models the reference is tiktoken (o200k) over the serialized request, framed the
way OpenAI's cookbook counts chat messages (3 tokens a message, 3 to prime the reply), tool
schemas as their JSON; the estimate must be within 2%. For Claude nothing exact is at hand
offline: the references are litellm's bundled (older) Anthropic tokenizer and chars/4 divided
by 0.70 and 0.76 (pi's chars/4 came out at 0.70–0.76 of real Claude counts); the estimate must
sit above them, and the factor it uses is printed.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from picochat import tokens
from picochat.budget import RequestDraft, estimate
from picochat.config import CompactionConfig, Config, ModelConfig
from picochat.models import limits_for, resolve_model
from picochat.projection import restore
from picochat.storage.store import open_store
from tests.bench.data import checkpoint, fill
from tests.bench.engine_cases import SYSTEM, TOOLS
from tests.bench.timing import Figure
from tests.helpers.storage import append_message

CODE_FILES = ("picochat/budget.py", "picochat/projection.py", "picochat/storage/store.py")


def _drafts(folder: Path) -> dict[str, RequestDraft]:
    """Three requests: synthetic turns with tool calls under a checkpoint, the README's prose
    as a conversation, and source files read by a tool."""
    store = open_store(folder / "estimate.db")
    root = Path(__file__).resolve().parents[2]
    chat = store.create_session("chat").id
    starts = fill(store, chat, 600)
    checkpoint(store, chat, starts[-60])
    prose = store.create_session("prose").id
    paragraphs = [p for p in (root / "README.md").read_text(encoding="utf-8").split("\n\n")
                  if p.strip()]
    for i, para in enumerate(paragraphs):
        append_message(store, prose, "user" if i % 2 == 0 else "assistant", para,
                       turn_id=f"t{i // 2}")
    code = store.create_session("code").id
    for i, name in enumerate(CODE_FILES):
        call = {"id": f"c{i}", "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": name})}}
        append_message(store, code, "user", f"What does {name} do?", turn_id=f"t{i}")
        append_message(store, code, "assistant", "", tool_calls=[call], turn_id=f"t{i}")
        append_message(store, code, "tool", (root / name).read_text(encoding="utf-8"),
                       tool_call_id=f"c{i}", name="read_file", turn_id=f"t{i}",
                       tool_status="ok")
        append_message(store, code, "assistant", f"{name} holds the storage layer's rules; "
                       "see `Store.append_message` and `restore`.", turn_id=f"t{i}")
    drafts = {k: RequestDraft(SYSTEM, restore(store, sid), TOOLS, "And what changed since?")
              for k, sid in (("synthetic chat + tools", chat), ("README prose", prose),
                             ("code", code))}
    store.close()
    return drafts


def openai_reference(messages: list[dict[str, Any]]) -> int:
    """OpenAI's cookbook rule over the serialized messages, with tiktoken's o200k."""
    total = 3
    for m in messages:
        total += 3 + tokens.count_text(m["role"]) + tokens.count_text(m.get("content") or "")
        if m.get("tool_calls"):
            total += tokens.count_text(json.dumps(m["tool_calls"], ensure_ascii=False))
        if m.get("tool_call_id"):
            total += tokens.count_text(m["tool_call_id"])
        if m.get("name"):
            total += 1 + tokens.count_text(m["name"])
    return total + tokens.count_text(tokens.tools_json(TOOLS))


def _text(messages: list[dict[str, Any]]) -> str:
    parts = [tokens.tools_json(TOOLS)]
    for m in messages:
        parts.append(m.get("content") or "")
        if m.get("tool_calls"):
            parts.append(json.dumps(m["tool_calls"], ensure_ascii=False))
    return "\n".join(parts)


def _anthropic_tokenizer():
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = (Path(list(spec.submodule_search_locations)[0]) / "litellm_core_utils" /
            "tokenizers" / "anthropic_tokenizer.json")
    try:
        from tokenizers import Tokenizer  # installed with litellm
    except ImportError:
        return None
    return Tokenizer.from_file(str(path)) if path.exists() else None


def _limits(model: str):
    config = Config(models={"m": ModelConfig("m", model, token_limit=400_000)})
    return limits_for(resolve_model(config, "m"), CompactionConfig())


def openai_accuracy(ctx: Any) -> list[Figure]:
    figures = []
    limits = _limits("openai/gpt-4o")
    for label, draft in _drafts(ctx.folder).items():
        messages = draft.messages()
        ours = estimate(limits, draft).total
        reference = openai_reference(messages)
        ratio = ours / reference
        figures.append(Figure("estimate / tiktoken count, gpt-4o", f"{label}, {reference:,} "
                              "tokens", (ratio,), "×", "within 2% (0.98–1.02)",
                              0.98 <= ratio <= 1.02, extra={
                                  "estimate": ours, "reference": reference,
                                  "recount_by_picochat": tokens.count_provider_messages(
                                      messages) + tokens.count_tools(TOOLS)}))
    return figures


def claude_accuracy(ctx: Any) -> list[Figure]:
    limits = _limits("anthropic/claude-sonnet-4-5")
    tokenizer = _anthropic_tokenizer()
    figures = []
    for label, draft in _drafts(ctx.folder).items():
        messages = draft.messages()
        ours = estimate(limits, draft).total
        text = _text(messages)
        density = len(text) / tokens.count_text(text)
        refs = {"chars/4 ÷ 0.70": len(text) / 4 / 0.70, "chars/4 ÷ 0.76": len(text) / 4 / 0.76}
        if tokenizer is not None:
            refs["litellm Anthropic tokenizer"] = len(tokenizer.encode(text).ids)
        for name, ref in refs.items():
            ratio = ours / ref
            figures.append(Figure(f"estimate / {name}, claude", f"{label}, {ref:,.0f} tokens",
                                  (ratio,), "×", "> 1 (above the reference)", ratio > 1,
                                  note=(f"{label}: factor {limits.token_factor} × o200k; "
                                        f"{density:.1f} characters per o200k token"
                                        if name.startswith("litellm") else ""),
                                  extra={"estimate": ours, "reference": round(ref)}))
    return figures


CASES = {"estimate-openai": openai_accuracy, "estimate-claude": claude_accuracy}
