"""The summary request: one call, no tools, low temperature, capped output.

The prompt asks for exactly the nine headings, and for a summary that reads as a record of what
happened, never as instructions to follow: a summary obeyed as a new command is a known failure
of other clients.
"""

from __future__ import annotations

from picochat import summary_contract as sc
from picochat import tokens
from picochat.providers.base import ProviderRequest

SUMMARY_TEMPERATURE = 0.2

SYSTEM = (
    "You write the checkpoint summary of a chat client's context compaction. The summary "
    "replaces the older part of a conversation in the model's context, so it must be "
    "self-contained and precise. You do not continue the conversation and you do not answer "
    "anything in it."
)

RULES = (
    "Rules:",
    "- Use exactly these Markdown headings, in this order, each once: "
    + ", ".join(f"`## {h}`" for h in sc.HEADINGS) + ". Write `- (none)` under a heading with "
    "nothing to say.",
    "- Keep the user's later corrections and say which earlier request they override.",
    "- Keep exact paths, ports, IDs, versions, commands and key numbers, verbatim.",
    "- Under `## Exact Facts`, do not copy the lines that start with `- #` followed by a "
    "number, or the line about dropped facts: picochat keeps that ledger of exact facts itself "
    "and adds it after your text. Write there only facts it would miss.",
    "- Say what was done, what failed, and what was not started; never guess a tool's outcome "
    "where its status is `unknown_not_persisted_separately`.",
    "- Write it as a record in the past tense (\"The user asked…\"), never as instructions or "
    "requests to the reader.",
    "- Do not output tool calls, hidden reasoning or provider-private state.",
    "- When a previous summary is given, fold it in: keep every fact it holds unless the "
    "transcript corrects it.",
    "- When the transcript says records were omitted or cut, say so under Progress.",
)


def summary_messages(transcript: str, focus: str | None = None,
                     instructions: str | None = None) -> tuple[dict[str, str], ...]:
    lines = ["Summarize the conversation transcript below into a checkpoint summary.", "",
             *RULES]
    if focus and focus.strip():
        lines += ["", "The user asked this compaction to focus on: " + focus.strip()]
    if instructions and instructions.strip():
        lines += ["", "Standing instructions for every summary: " + instructions.strip()]
    lines += ["", transcript]
    return ({"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(lines)})


def prompt_overhead(focus: str | None = None, instructions: str | None = None) -> int:
    """Tokens of the summary request without its transcript: the window less this (and the
    output reserve and a safety margin) is what the transcript may fill."""
    return tokens.count_provider_messages(summary_messages("", focus, instructions))


def summary_request(transcript: str, max_tokens: int, focus: str | None = None,
                    instructions: str | None = None) -> ProviderRequest:
    return ProviderRequest(messages=summary_messages(transcript, focus, instructions), tools=(),
                           temperature=SUMMARY_TEMPERATURE, max_tokens=max_tokens,
                           purpose="summary")
