"""The inline-thinking splitter, as a spec: what a reply's text becomes, thinking and answer.

`split(text)` is what a whole reply splits into; `ThinkSplitter` does the same to a stream, and
any chunking of the same text gives the same split.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from picochat.providers.base import TextDelta, ThinkingDelta
from picochat.providers.thinking import ThinkSplitter, split, starts_inside


def streamed(pieces: list[str], inside: bool = False) -> tuple[str, str, ThinkSplitter]:
    splitter = ThinkSplitter(inside)
    events = [e for p in pieces for e in splitter.feed(p)] + splitter.flush()
    assert all(e.text for e in events), events  # never an empty piece
    thinking = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    return thinking, answer, splitter


# --- a reply with no thinking is left exactly as it is ------------------------------------------


def test_plain_text_is_all_answer():
    assert split("Port 8443 is open.\n") == ("", "Port 8443 is open.\n")


def test_leading_whitespace_of_a_plain_answer_is_kept():
    assert split("\n  indented code") == ("", "\n  indented code")


def test_a_think_tag_later_in_the_answer_is_text_about_tags():
    text = "Wrap it in <think> and </think> tags."
    assert split(text) == ("", text)


def test_similar_tags_are_not_thinking():
    assert split("<thinking>x</thinking> y") == ("", "<thinking>x</thinking> y")
    assert split("<thin") == ("", "<thin")  # a tag that never completes is text


# --- <think>…</think> at the start -------------------------------------------------------------


def test_a_think_block_at_the_start_is_thinking_and_the_rest_the_answer():
    assert split("<think>\nThe user wants 2+2.\n</think>\n\nIt is 4.") == (
        "\nThe user wants 2+2.\n", "It is 4.")


def test_whitespace_before_the_block_is_allowed():
    assert split("\n\n  <think>hm</think>Yes.") == ("hm", "Yes.")


def test_an_empty_block_leaves_just_the_answer():
    # Qwen3 with thinking switched off writes an empty block
    assert split("<think>\n\n</think>\n\nHello!") == ("\n\n", "Hello!")


def test_the_answer_keeps_its_own_inner_blank_lines():
    assert split("<think>a</think>\n\nline 1\n\nline 2\n") == ("a", "line 1\n\nline 2\n")


def test_a_reply_cut_while_thinking_has_no_answer():
    assert split("<think>step 1, step 2, st") == ("step 1, step 2, st", "")


def test_a_partial_closing_tag_at_the_cut_is_still_thinking():
    assert split("<think>almost done</thi") == ("almost done</thi", "")


def test_only_the_first_block_is_thinking():
    assert split("<think>a</think>b <think>c</think>") == ("a", "b <think>c</think>")


# --- templates that open the block in the prompt ------------------------------------------------


def test_a_reply_that_starts_inside_the_block_ends_it_with_the_closing_tag():
    assert split("The user greets me.\n</think>\n\nHello!", starts_inside=True) == (
        "The user greets me.\n", "Hello!")


def test_an_explicit_opening_tag_is_fine_there_too():
    assert split("<think>hm</think>ok", starts_inside=True) == ("hm", "ok")


def test_a_reply_that_never_closes_the_block_was_all_answer():
    thinking, answer, splitter = streamed(["Just ", "an answer."], inside=True)
    assert answer == "Just an answer."
    assert splitter.not_thinking
    assert split("Just an answer.", starts_inside=True) == ("", "Just an answer.")


def test_thinking_that_came_separately_means_the_text_is_the_answer():
    splitter = ThinkSplitter(starts_inside=True)
    splitter.server_thinks()  # reasoning_content arrived first
    # litellm's Ollama stream leaves the blank lines that followed the removed </think>
    events = splitter.feed("\n\n") + splitter.feed("The answer.") + splitter.flush()
    assert events == [TextDelta("The answer.")]


def test_a_closing_tag_with_no_block_is_kept_but_noted():
    thinking, answer, splitter = streamed(["I should greet.</th", "ink>\n\nHello!"])
    assert (thinking, answer) == ("", "I should greet.</think>\n\nHello!")
    assert splitter.stray_close  # the provider starts its next reply inside the block


def test_a_closing_tag_after_a_real_block_is_not_a_stray():
    _, _, splitter = streamed(["<think>a</think>b </think>"])
    assert not splitter.stray_close


def test_model_names_whose_templates_open_the_block():
    for name in ("hosted_vllm/deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "ollama/deepseek-r1:7b",
                 "openai/Qwen/QwQ-32B", "openai/Qwen3-30B-A3B-Thinking-2507"):
        assert starts_inside(name), name
    for name in ("openai/gpt-4o-mini", "ollama/llama3.1", "openai/smollm2-135m",
                 "anthropic/claude-sonnet-4-5", "openai/r10-model"):
        assert not starts_inside(name), name


# --- streaming: tags split across chunks ---------------------------------------------------------


def test_tags_split_across_chunks():
    pieces = ["<", "thi", "nk>", "plan", "</", "th", "ink", ">", "\n", "\n", "Do", "ne"]
    assert streamed(pieces)[:2] == ("plan", "Done")


def test_thinking_streams_before_the_block_ends():
    splitter = ThinkSplitter()
    assert splitter.feed("<think>first") == [ThinkingDelta("first")]
    assert splitter.feed(" second</") == [ThinkingDelta(" second")]  # "</" may be the tag
    assert splitter.feed("think>Answer") == [TextDelta("Answer")]


def test_a_plain_answer_streams_at_once():
    splitter = ThinkSplitter()
    assert splitter.feed("Hello") == [TextDelta("Hello")]
    assert splitter.feed(" </") == [TextDelta(" </")]  # no block: nothing is held back


TEXTS = st.one_of(
    st.just("<think>\nplan: a, b\n</think>\n\nThe answer: 4.\n"),
    st.just("  <think></think>Hi"),
    st.just("reasoning here\n</think>\n\nfinal"),
    st.just("<think>never closed"),
    st.just("plain </think> text <think>"),
    st.text(alphabet="<>/thinkab \n", max_size=40),
    st.builds(lambda a, b: f"<think>{a}</think>{b}", st.text(max_size=20), st.text(max_size=20)),
)


@st.composite
def chunked(draw):
    text = draw(TEXTS)
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
    return text, pieces, draw(st.booleans())


@settings(max_examples=400, deadline=None)
@given(chunked())
def test_any_chunking_gives_the_same_split(case):
    text, pieces, inside = case
    whole = streamed([text], inside)
    parts = streamed(pieces, inside)
    assert parts[:2] == whole[:2]
    assert parts[2].stray_close == whole[2].stray_close
    assert parts[2].not_thinking == whole[2].not_thinking


@settings(max_examples=300, deadline=None)
@given(chunked())
def test_the_answer_is_the_texts_own_tail_and_the_thinking_a_part_of_it(case):
    text, pieces, inside = case
    thinking, answer, _ = streamed(pieces, inside)
    assert text.endswith(answer) and thinking in text  # nothing added, nothing reordered
    if "<think>" not in text and "</think>" not in text:
        assert answer == text  # no tags: the text is untouched, whatever the mode
