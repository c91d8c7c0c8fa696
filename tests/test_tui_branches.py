"""Rewind in place and switch branches in the app (issue 36, items 1 and 4): e on an earlier
message of the user's puts it in the prompt; sending it starts a branch there, the transcript
shows the new branch and says where the rest went; ctrl+b lists the branches and switches;
what the provider receives follows the branch in use."""

from __future__ import annotations

from textual.widgets import OptionList

from picochat.tui.branch_picker import BranchPicker
from picochat.tui.session_picker import SessionPicker
from picochat.tui.chat import Notice, UserMessage
from picochat.tui.prompt import Prompt
from tests.helpers.scripted import Hold, Streaming
from tests.helpers.tui import SIZE, chat_once, conversation, idle, make_app, say, texts
from tests.helpers.waiting import settle


def status_line(app) -> str:
    from picochat.tui.status import StatusBar

    return str(app.query_one(StatusBar).render())


async def select_user_message(pilot, app, text: str) -> UserMessage:
    """alt+↑, then ↑ until the user's message `text` is selected."""
    await pilot.press("alt+up")
    for _ in range(20):
        if isinstance(app.focused, UserMessage) and app.focused.text == text:
            return app.focused
        await pilot.press("up")
    raise AssertionError(f"never selected {text!r}")


async def test_editing_an_earlier_message_sends_it_as_a_new_branch_and_ctrl_b_goes_back(store):
    provider = Streaming(turns=["one", "two", "three", "two, better", "three again"])
    app = make_app(store, provider=provider)
    async with app.run_test(size=SIZE) as pilot:
        sid = app.session.id
        await settle(pilot, app, lambda: app.ready)
        for q in ("first question", "second question", "third question"):
            await chat_once(pilot, app, store, q)
        prompt = app.query_one(Prompt)
        prompt.put("a draft I was writing")

        await select_user_message(pilot, app, "second question")
        await pilot.press("e")
        await settle(pilot, app, lambda: prompt.text == "second question")
        assert app.focused is prompt and "editing message 3" in str(prompt.border_title)
        await pilot.press("escape")          # changed my mind: the draft comes back
        assert prompt.text == "a draft I was writing" and not prompt.border_title

        await select_user_message(pilot, app, "second question")
        await pilot.press("e")
        await settle(pilot, app, lambda: prompt.text == "second question")
        await pilot.press("end", *", asked better", "enter")
        await settle(pilot, app, lambda: idle(app) and conversation(app)[-1:] ==
                     [("assistant", "two, better")], what="the edit was never answered")
        assert conversation(app) == [("user", "first question"), ("assistant", "one"),
                                     ("user", "second question, asked better"),
                                     ("assistant", "two, better")]
        said = [t for t in texts(app, Notice) if t.startswith("Branch 1 starts here")]
        assert said and "2 turns from there on stay on branch 0" in said[0]
        # the provider was sent the new branch only: nothing of the old second or third turn
        sent = " ".join(str(m.get("content")) for m in provider.turn_requests[-1].messages)
        assert "first question" in sent and "second question, asked better" in sent
        assert "third question" not in sent and "three" not in sent
        assert [b.id for b in store.branches(sid)] == [0, 1]
        await settle(pilot, app, lambda: "branch 1" in status_line(app))

        await pilot.press("ctrl+b")
        await settle(pilot, app, lambda: isinstance(app.screen, BranchPicker))
        await pilot.press("up", "enter")     # the picker opens on the branch in use: 1
        await settle(pilot, app, lambda: app.session.branch == 0 and idle(app))
        await settle(pilot, app, lambda: conversation(app)[-1:] == [("assistant", "three")])
        assert [u for u, _ in conversation(app)].count("user") == 3
        await say(pilot, "and now?")
        await settle(pilot, app, lambda: idle(app) and conversation(app)[-1:] ==
                     [("assistant", "three again")])
        sent = " ".join(str(m.get("content")) for m in provider.turn_requests[-1].messages)
        assert "third question" in sent and "asked better" not in sent
        assert store.branches(sid)[0].turns == 4


async def test_e_while_an_answer_runs_says_to_wait_and_one_branch_says_how_to_start_one(store):
    first = Hold("held", "done")
    app = make_app(store, provider=Streaming(turns=["ok", first]))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await chat_once(pilot, app, store, "a question")
        await say(pilot, "/branches")
        await settle(pilot, app, lambda: any(t.startswith("One branch so far") for t in
                                             texts(app, Notice)))
        await say(pilot, "another")
        await settle(pilot, app, lambda: first.reached.is_set())
        await select_user_message(pilot, app, "a question")
        await pilot.press("e")
        await settle(pilot, app, lambda: any("edit an earlier message once it ends" in
                                             str(n.message) for n in app._notifications))
        assert app.query_one(Prompt).editing is None
        first.release.set()
        await settle(pilot, app, lambda: idle(app))


async def test_export_writes_the_branch_on_screen_or_every_branch(store, tmp_path):
    import json

    app = make_app(store, provider=Streaming(turns=["one", "two", "two again"]))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        for q in ("first question", "second question"):
            await chat_once(pilot, app, store, q)
        await select_user_message(pilot, app, "second question")
        await pilot.press("e", "end", *" again", "enter")
        await settle(pilot, app, lambda: idle(app) and conversation(app)[-1:] ==
                     [("assistant", "two again")])
        mine, every = tmp_path / "mine.json", tmp_path / "every.json"
        await say(pilot, f"/export json {mine}")
        await say(pilot, f"/export json {every} --all-branches")
        await settle(pilot, app, lambda: any(t.startswith("Exported every branch") for t in
                                             texts(app, Notice)))
        shown = [m["content"].strip() for m in json.loads(mine.read_text())["messages"]]
        assert shown == ["first question", "one", "second question again", "two again"]
        branches = json.loads(every.read_text())["branches"]
        assert [(b["branch"], b["current"]) for b in branches] == [(0, False), (1, True)]
        assert [m["content"].strip() for m in branches[0]["messages"]] == [
            "first question", "one", "second question", "two"]


async def test_fork_opens_a_new_session_with_this_context_and_leaves_this_one(store,
                                                                              monkeypatch):
    """`/fork NAME`: the app opens a new session whose transcript and request hold this
    one's context (its turns and pins); this session stays as it was."""
    from picochat import opening
    from picochat.models import resolve_model

    forked = Streaming(turns=["in the fork"])
    monkeypatch.setattr(opening, "open_model", lambda config, session, *_, **__: (
        resolve_model(config, "offline"), forked))
    app = make_app(store, provider=Streaming(turns=["one", "two"]))
    async with app.run_test(size=SIZE) as pilot:
        src = app.session.id
        await settle(pilot, app, lambda: app.ready)
        await chat_once(pilot, app, store, "our redis runs on 6380")
        await chat_once(pilot, app, store, "the deploy key is kestrel")
        await say(pilot, "/pin the staging host is osprey-7")
        await settle(pilot, app, lambda: store.pins(src) != ())
        before = [m.content for m in store.history(src)]

        await say(pilot, "/fork t")                        # the name is this session's
        await settle(pilot, app, lambda: any("exists" in t for t in texts(app, Notice)))
        assert app.session.id == src and len(store.list_sessions()) == 1

        await say(pilot, "/fork try-postgres")
        await settle(pilot, app, lambda: app.session.name == "try-postgres" and idle(app))
        assert conversation(app) == [("user", "our redis runs on 6380"), ("assistant", "one"),
                                     ("user", "the deploy key is kestrel"),
                                     ("assistant", "two")]
        said = texts(app, Notice)[-1]
        assert said.startswith("Forked t after message 4 into try-postgres") and "1 pin" in said
        assert "/sessions switches back" in said
        await settle(pilot, app, lambda: "try-postgres" in status_line(app))

        await say(pilot, "which port does redis use?")
        await settle(pilot, app, lambda: idle(app) and conversation(app)[-1:] ==
                     [("assistant", "in the fork")], what="the fork never answered")
        sent = " ".join(str(m.get("content")) for m in forked.turn_requests[-1].messages)
        assert "our redis runs on 6380" in sent and "osprey-7" in sent
        assert [m.content for m in store.history(src)] == before  # the source as it was
        assert store.latest_session().id == app.session.id != src

        await say(pilot, "/sessions")                      # the two begin alike: which is
        await settle(pilot, app, lambda: isinstance(app.screen, SessionPicker))  # the fork
        options = app.screen.query_one("#sp-list", OptionList)
        rows = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        assert "fork of t" in rows[0] and "try-postgres" in rows[0]
        assert "fork of" not in rows[1]


async def test_fork_typed_while_an_answer_runs_waits_for_it_and_carries_it(store):
    held = Hold("the answer so", "far is whole")
    app = make_app(store, provider=Streaming(turns=[held]))
    async with app.run_test(size=SIZE) as pilot:
        src = app.session.id
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "a question")
        await held.reached.wait()
        await say(pilot, "/fork later")
        await settle(pilot, app, lambda: any(t.startswith("/fork is queued")
                                             for t in texts(app, Notice)))
        assert app.session.id == src                       # nothing forked mid-answer
        held.release.set()
        await settle(pilot, app, lambda: app.session.name == "later" and idle(app))
        assert conversation(app)[-1] == ("assistant", "the answer so far is whole")
        assert texts(app, Notice)[-1].startswith("Forked t after message 2 into later")
