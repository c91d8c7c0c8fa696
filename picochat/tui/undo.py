"""Taking back a turn (/undo, /retry): which turn goes, whether the reader has seen it, and
asking first when they have not.

Another picochat (`picochat ask` on the same session) may write a turn while the host is open;
the transcript shows it only when it is read again. Such a turn is named, its first words
cleaned as the screen cleans them, and taken back only after a yes; one the transcript shows
goes at once. Between the question and the yes another turn may land: the undo then takes
back nothing (`SessionWorker.undo` checks the turn is still the newest).
"""

from __future__ import annotations

from typing import Awaitable, Callable

from picochat.errors import PicochatError
from picochat.session import LastTurn
from picochat.tui.host import CommandHost
from picochat.tui.safe import clean
from picochat.tui.screens import ConfirmScreen


async def newest_turn(host: CommandHost) -> tuple[LastTurn | None, bool]:
    """The turn an undo would take back, once the work queued before this command is done,
    and whether the transcript shows it (it waits for the turns sent before to be shown)."""
    sent_before = host.conversation.turns_shown()
    turn = await host.worker.last_turn()
    if turn is None:
        return None, False
    await sent_before.wait()
    return turn, host.chat.has_shown(turn.seqs)


async def after_asking(host: CommandHost, shown: bool, question: str,
                       act: Callable[[], Awaitable[object]]) -> None:
    """`act` at once on a turn the reader has seen; on one they have not, only after y."""
    if shown:
        await act()
        return

    async def answered(yes: bool | None) -> None:
        if not yes:
            return
        try:  # no longer under run_command, which says a database error in one line
            await act()
        except PicochatError as exc:
            await host.chat.add_notice(exc.user_line(), "error")
    host.push_screen(ConfirmScreen(question), answered)


def unseen_question(turn: LastTurn, ask: str, then: str) -> str:
    """What the confirmation says of a turn written elsewhere: which messages, and the first
    words of its question as the screen would show them."""
    said = (f"“{first_words(turn.question)}”" if turn.question is not None
            else "(an answer with no question)")
    return (f"{ask}\nThe newest turn in the context, {messages_label(turn.seqs)}, was written "
            f"by another picochat on this session: {said}\n{then}")


def first_words(text: str, chars: int = 80) -> str:
    """The start of a message on one line, cleaned as the screen cleans it."""
    flat = " ".join(clean(text).split())
    return flat if len(flat) <= chars else flat[:chars - 1].rstrip() + "…"


def messages_label(seqs: tuple[int, ...]) -> str:
    first, last = seqs[0], seqs[-1]
    return f"message {first}" if first == last else f"messages {first}–{last}"


async def undo_turn(host: CommandHost, turn: LastTurn, shown: bool) -> bool:
    """Undo `turn` if it is still the newest in the context, and say what was done."""
    chat = host.chat
    try:
        result = await host.worker.undo(turn.seqs)
    except PicochatError as exc:
        await chat.add_notice(exc.user_line(), "error")
        return False
    if result is None or not result.removed:
        await chat.add_notice("Nothing taken back: a newer turn was written meanwhile, so "
                              "the one named is no longer the last",
                              "error")
        return False
    await host.reload()
    dropped = ("; the summary that covered it is no longer used, so the model reads those "
               "messages as they are" if result.checkpoint_dropped else "")
    whose = "your last turn" if shown else "the turn another picochat wrote"
    await host.chat.add_notice(
        f"Took back {whose} ({messages_label(result.removed)}): the model no longer reads "
        f"it; it stays in the history{dropped}")
    host.refresh_status()
    return True
