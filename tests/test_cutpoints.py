"""Turn boundaries and cut points, as DESIGN.md D9 and D20.2 state them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from picochat.cutpoints import find_cut_point, group_turns
from picochat.messages import Message


def msg(seq, role, turn=None, tokens=10, calls=None, call_id=None):
    return Message("s", seq, role, f"m{seq}", calls, call_id, None, turn, None, "complete",
                   tokens, 0)


def call(cid):
    return {"id": cid, "type": "function", "function": {"name": "ls", "arguments": "{}"}}


def test_keeps_whole_turns_from_the_tail_by_tokens():
    turns = group_turns([msg(i, "user" if i % 2 else "assistant", f"t{(i + 1) // 2}", 100)
                         for i in range(1, 11)])  # five turns of 200 tokens
    assert [t.first_seq for t in turns] == [1, 3, 5, 7, 9]
    assert turns[find_cut_point(turns, 400)].first_seq == 7
    assert turns[find_cut_point(turns, 599)].first_seq == 7  # a third turn would exceed keep
    assert turns[find_cut_point(turns, 600)].first_seq == 5


def test_the_newest_turn_is_kept_even_when_it_alone_exceeds_keep():
    turns = group_turns([msg(1, "user", "a"), msg(2, "assistant", "a"),
                         msg(3, "user", "b", 5000), msg(4, "assistant", "b", 5000)])
    assert turns[find_cut_point(turns, 100)].first_seq == 3


def test_nothing_to_fold_when_only_one_turn_or_everything_fits():
    one = group_turns([msg(1, "user", "a"), msg(2, "assistant", "a")])
    assert find_cut_point(one, 0) is None
    two = group_turns([msg(1, "user", "a"), msg(2, "assistant", "b")])
    assert find_cut_point(two, 10_000) is None


def test_steering_and_parallel_tool_calls_stay_in_their_turn():
    rows = [msg(1, "user", "a"), msg(2, "assistant", "a"),
            msg(3, "user", "b"), msg(4, "user", "b"),  # steering typed mid-turn
            msg(5, "assistant", "b", calls=(call("x"), call("y"))),
            msg(6, "tool", "b", call_id="x"), msg(7, "tool", "b", call_id="y"),
            msg(8, "assistant", "b")]
    turns = group_turns(rows)
    assert [[m.seq for m in t.messages] for t in turns] == [[1, 2], [3, 4, 5, 6, 7, 8]]


def test_rows_without_turn_id_fall_back_to_roles():
    rows = [msg(1, "user"), msg(2, "assistant", calls=(call("x"),)), msg(3, "tool", call_id="x"),
            msg(4, "assistant"), msg(5, "user"), msg(6, "user"), msg(7, "assistant")]
    assert [t.first_seq for t in group_turns(rows)] == [1, 5]


@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool", "calls"]),
                          st.booleans(), st.integers(1, 500)), min_size=1, max_size=60),
       st.integers(0, 5000))
def test_a_cut_never_lands_on_a_tool_result_or_splits_a_group(spec, keep):
    rows, turn = [], 0
    for seq, (role, with_id, tokens) in enumerate(spec, start=1):
        if role == "user":
            turn += 1
        tid = f"t{turn}" if with_id else None
        if role == "calls":
            rows.append(msg(seq, "assistant", tid, tokens, calls=(call(f"c{seq}"),)))
        elif role == "tool":
            rows.append(msg(seq, "tool", tid, tokens, call_id="c"))
        else:
            rows.append(msg(seq, role, tid, tokens))
    turns = group_turns(rows)
    assert [m for t in turns for m in t.messages] == rows  # a partition, in order
    index = find_cut_point(turns, keep)
    if index is not None:
        first = turns[index].messages[0]
        assert first.role != "tool"
        assert index >= 1


def test_a_huge_turn_crossing_the_keep_boundary_is_folded_not_kept_forever():
    turns = group_turns([msg(1, "user", "a", 6_000), msg(2, "assistant", "a", 10),
                         msg(3, "user", "b", 30), msg(4, "assistant", "b", 30),
                         msg(5, "user", "c", 30), msg(6, "assistant", "c", 30)])
    assert turns[find_cut_point(turns, 2_048)].first_seq == 3


def test_min_turns_keeps_the_last_complete_turn_beside_one_in_progress():
    turns = group_turns([msg(1, "user", "a"), msg(2, "assistant", "a"),
                         msg(3, "user", "b", 50), msg(4, "assistant", "b", 50),
                         msg(5, "user", "c", 5_000)])
    assert turns[find_cut_point(turns, 100)].first_seq == 5
    assert turns[find_cut_point(turns, 100, min_turns=2)].first_seq == 3
    assert find_cut_point(turns[1:], 100, min_turns=2) is None


def test_a_question_and_its_answer_are_never_cut_apart_when_two_writers_interleave():
    # `picochat ask` in two shells: turn a asks (#3), turn b asks and is answered (#4, #5),
    # then a's answer lands (#6). No seq boundary separates a from b: they fold or stay together.
    rows = [msg(1, "user", "old"), msg(2, "assistant", "old"),
            msg(3, "user", "a"), msg(4, "user", "b"), msg(5, "assistant", "b"),
            msg(6, "assistant", "a"), msg(7, "user", "c"), msg(8, "assistant", "c")]
    turns = group_turns(rows)
    assert [[m.seq for m in t.messages] for t in turns] == [[1, 2], [3, 4, 5, 6], [7, 8]]
    assert turns[find_cut_point(turns, 0)].first_seq == 7


def _interleaved(draw_order: list[int], shapes: list[str]) -> list[Message]:
    """Rows of several turns written at once, in the order `draw_order` picks the writers."""
    scripts = {"plain": ["user", "assistant"], "tools": ["user", "calls", "tool", "assistant"],
               "steer": ["user", "user", "assistant"], "open": ["user"]}
    pending = [list(scripts[s]) for s in shapes]
    rows: list[Message] = []
    for writer in draw_order:
        queue = pending[writer % len(pending)]
        if not queue:
            continue
        role, tid, seq = queue.pop(0), f"t{writer % len(pending)}", len(rows) + 1
        if role == "calls":
            rows.append(msg(seq, "assistant", tid, calls=(call(f"{tid}c"),)))
        elif role == "tool":
            rows.append(msg(seq, "tool", tid, call_id=f"{tid}c"))
        else:
            rows.append(msg(seq, role, tid))
    return rows


@given(st.lists(st.sampled_from(["plain", "tools", "steer", "open"]), min_size=1, max_size=6),
       st.lists(st.integers(0, 5), min_size=1, max_size=40), st.integers(0, 200))
def test_interleaved_turns_stay_whole_on_either_side_of_every_cut(shapes, order, keep):
    rows = _interleaved(order, shapes)
    turns = group_turns(rows)
    assert [m for t in turns for m in t.messages] == rows  # a partition, in seq order
    for tid in {m.turn_id for m in rows}:
        assert sum(any(m.turn_id == tid for m in t.messages) for t in turns) == 1
    index = find_cut_point(turns, keep)
    if index is not None:
        folded = {m.turn_id for t in turns[:index] for m in t.messages}
        kept = {m.turn_id for t in turns[index:] for m in t.messages}
        assert not folded & kept
