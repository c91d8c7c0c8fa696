"""A turn streamed from a real model, and the usage figure `/info` builds on.

llama-cpp-python's server streams an answer token by token but puts no usage in the stream,
even when asked (`stream_options.include_usage`); vLLM, OpenAI and llama.cpp's own server do.
A figure called "provider-reported" must be the server's own count, for both kinds.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from picochat import tokens
from tests.helpers.real.picochat import Picochat
from tests.helpers.real.llama_server import LlamaServer
from tests.helpers.real.proxy import Proxy

pytestmark = pytest.mark.real

QUESTION = "Name three colors."


async def _turn(picochat: Picochat, text: str) -> tuple[Any, list[str], dict[str, Any], int]:
    """One turn through the session worker, as the chat app runs it: (outcome, the text deltas
    as they arrived, the /info card after it, the stored answer's token count)."""
    from picochat.config import load_config
    from picochat.models import create_provider, resolve_model
    from picochat.paths import resolve_paths
    from picochat.providers.base import TextDelta
    from picochat.session import SessionWorker
    from picochat.storage import open_store

    config = load_config(picochat.config)
    resolved = resolve_model(config, "smol")
    store = open_store(resolve_paths(str(picochat.data_dir), str(picochat.config)).database)
    try:
        session = store.find_or_create_session("s")
        async with SessionWorker.from_config(store, session.id, resolved,
                                             create_provider(resolved), config) as worker:
            handle = worker.submit_turn(text)
            deltas = [e.text async for e in handle if isinstance(e, TextDelta)]
            outcome = await handle.result()
            info = worker.info().as_dict()
        answer = store.history(session.id)[-1]
        return outcome, deltas, info, answer.tokens
    finally:
        store.close()


def test_a_stream_without_usage_is_never_called_provider_reported(
        picochat: Picochat, server_2048: LlamaServer) -> None:
    with Proxy(server_2048.base_url) as proxy:  # pass-through: it only records
        picochat.configure(proxy.base_url, 2048)
        outcome, deltas, info, _ = asyncio.run(_turn(picochat, QUESTION))
    assert outcome.reply.strip(), outcome
    assert len(deltas) >= 3 and "".join(deltas) == outcome.reply  # streamed, piece by piece
    [sent] = proxy.requests
    assert sent["stream"] is True and sent.get("tools")  # tools on, as by default
    assert b'"usage"' not in proxy.answers[0]  # the server reported no usage in the stream
    counted = server_2048.prompt_tokens(sent)  # what the server counts in that very request
    # litellm makes up a usage from its own tokenizer when a stream carries none; that is not
    # the server's word: the turn reports no usage but the server's, /info says "estimate",
    # and the estimate is never below what the server counted
    assert outcome.usage is None or outcome.usage.prompt_tokens == counted, \
        (outcome.usage, counted)
    assert info["usage_source"] == "estimate", (info["usage_source"], info["used_tokens"],
                                                counted)
    assert info["used_tokens"] >= counted


def test_usage_a_server_reports_in_the_stream_is_what_info_uses(
        picochat: Picochat, server_2048: LlamaServer) -> None:
    with Proxy(server_2048.base_url, length_first=True) as proxy:  # usage in the stream
        picochat.configure(proxy.base_url, 2048)
        outcome, deltas, info, answer_tokens = asyncio.run(_turn(picochat, QUESTION))
    assert outcome.reply.strip() and "".join(deltas) == outcome.reply
    [sent] = proxy.requests
    assert b'"usage"' in proxy.answers[0]
    counted = server_2048.prompt_tokens(sent)
    assert server_2048.count_prompt(sent) == counted  # the tests' cheap count is the server's
    assert outcome.usage is not None and outcome.usage.prompt_tokens == counted
    # the next request is the reported prompt plus the answer, estimated; the server's count
    # does not hold the tool schemas its template leaves out, so it is far below the estimate
    assert info["usage_source"] == "provider+estimate"
    assert info["used_tokens"] == counted + tokens.scale(answer_tokens, info["token_factor"])
    assert info["used_tokens"] < sum(info["parts"].values())
