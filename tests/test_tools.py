"""The built-in tools as the model calls them: results, refusals, and no exception ever."""

from __future__ import annotations

import json
import os

import pytest

from picochat.tools.base import ToolContext
from picochat.tools.files import MAX_BYTES
from picochat.tools.registry import BUILTIN, run_tool, schemas
from tests.helpers.storage import append_message


@pytest.fixture
def ctx(store, tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    s = store.create_session("tools")
    return ToolContext(store, s.id, root)


def call(ctx, name, **args):
    return run_tool(name, json.dumps(args), ctx)


def test_schemas_follow_the_enabled_list_and_are_openai_shaped():
    assert schemas([]) == ()
    out = schemas(["read_file", "history_search", "nope"])
    assert [s["function"]["name"] for s in out] == ["history_search", "read_file"]
    for s in schemas(BUILTIN):
        assert s["type"] == "function" and s["function"]["parameters"]["type"] == "object"


def test_history_search_lists_seq_role_and_passage(ctx):
    append_message(ctx.store, ctx.session_id, "user", "the build id is B-20931")
    append_message(ctx.store, ctx.session_id, "assistant", "noted")
    result = call(ctx, "history_search", query="build id", limit=3)
    assert result.status == "ok"
    assert "#1 user:" in result.content and "B-20931" in result.content
    assert "No message" in call(ctx, "history_search", query="zebra").content


def test_timeline_recall_without_summaries_says_so(ctx):
    result = call(ctx, "timeline_recall", query="anything")
    assert result.status == "ok" and "No earlier summary" in result.content


def test_read_file_reads_text_inside_the_root_and_bounds_it(ctx):
    (ctx.root / "notes.md").write_text("hello\n" * 10)
    (ctx.root / "sub").mkdir()
    (ctx.root / "sub" / "big.txt").write_text("x" * (MAX_BYTES * 2))
    assert call(ctx, "read_file", path="notes.md").content == "hello\n" * 10
    big = call(ctx, "read_file", path="sub/big.txt", max_bytes=100)
    assert big.status == "ok" and big.content.startswith("x" * 100) and "cut at 100" in big.content
    huge = call(ctx, "read_file", path="sub/big.txt", max_bytes=10**9)
    assert len(huge.content) < MAX_BYTES + 200


@pytest.mark.parametrize("make, path, words", [
    (None, "../secret.txt", "`..` is not allowed"),
    (None, "sub/../../secret.txt", "`..` is not allowed"),
    ("outside_abs", None, "outside the folders read_file may read"),
    ("symlink_out", "link.txt", "outside the folders read_file may read"),
    (None, "/dev/zero", "outside the folders read_file may read"),
    ("fifo", "pipe", "not a regular file"),
    ("dir", "adir", "is a directory"),
    ("binary", "blob.bin", "binary file"),
    (None, "missing.txt", "no such file"),
])
def test_read_file_refuses_escapes_devices_fifos_and_binaries(ctx, tmp_path, make, path, words):
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    if make == "outside_abs":
        path = str(secret)
    elif make == "symlink_out":
        os.symlink(secret, ctx.root / "link.txt")
    elif make == "fifo":
        os.mkfifo(ctx.root / "pipe")
    elif make == "dir":
        (ctx.root / "adir").mkdir()
    elif make == "binary":
        (ctx.root / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    result = call(ctx, "read_file", path=path)
    assert result.status == "error" and words in result.content, result.content
    assert "top secret" not in result.content


def test_a_device_inside_the_root_is_refused_before_it_is_opened(ctx):
    os.symlink("/dev/zero", ctx.root / "zero")  # resolves outside: refused as such
    assert call(ctx, "read_file", path="zero").status == "error"


@pytest.mark.parametrize("name, arguments, words", [
    ("rm_rf", "{}", "no tool named 'rm_rf'"),
    ("read_file", "{not json", "not valid JSON"),
    ("read_file", "[1, 2]", "must be a JSON object"),
    ("read_file", "{}", "`path` is required"),
    ("history_search", '{"query": "x", "limit": "many"}', "`limit` must be a number"),
])
def test_bad_calls_are_error_results_never_exceptions(ctx, name, arguments, words):
    result = run_tool(name, arguments, ctx)
    assert result.status == "error" and words in result.content


def test_a_disabled_tool_is_not_callable(ctx):
    result = run_tool("read_file", '{"path": "x"}', ctx, enabled=["history_search"])
    assert result.status == "error" and "available: history_search" in result.content


def test_a_crashing_tool_is_an_error_result(ctx, monkeypatch):
    def boom(*a):
        raise RuntimeError("bug")

    monkeypatch.setattr(ctx.store.search, "messages", boom)
    result = call(ctx, "history_search", query="x")
    assert result.status == "error" and "RuntimeError" in result.content
