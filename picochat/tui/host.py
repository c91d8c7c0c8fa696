"""What a slash command may ask of the app: a narrow protocol, not the app itself.

The handlers (tui/commands.py) and the undo flow (tui/undo.py) see the session's worker, the
sessions of the database, the conversation on screen, and a few things only the app can do
(switch sessions, show a screen, refresh the panel and the bar). Nothing private: the app's
layout, warm-up and lifecycle stay its own, and these modules never import it.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Protocol

from textual.screen import Screen
from textual.worker import Worker

from picochat.catalog import SessionCatalog
from picochat.config import Config
from picochat.context_usage import ContextUsage
from picochat.messages import Session
from picochat.models import ResolvedModel
from picochat.paths import Paths
from picochat.providers.base import Provider
from picochat.session import SessionWorker
from picochat.tui.chat import ChatView
from picochat.tui.conversation import Conversation


class CommandHost(Protocol):
    """The app as a slash command sees it."""

    worker: SessionWorker       # the open session's: its turns, commands and reads
    session: Session            # the open session as last read
    sessions: SessionCatalog    # every session of the database
    config: Config
    paths: Paths | None

    @property
    def conversation(self) -> Conversation: ...  # the running turn and the transcript

    @property
    def chat(self) -> ChatView: ...

    async def reload(self, from_elsewhere: bool = False) -> None: ...

    def config_loaded(self) -> None: ...  # /reload read the config file

    def usage(self) -> ContextUsage: ...

    async def open_session(self, session: Session,
                           opened: tuple[ResolvedModel, Provider] | None = None) -> None: ...

    async def context_moved(self) -> None: ...

    async def switch_branch(self, branch: int) -> None: ...

    async def refresh_panel(self) -> None: ...

    def refresh_status(self) -> None: ...

    def action_info(self) -> None: ...

    def action_checkpoints(self) -> None: ...

    def action_help(self) -> None: ...

    def set_theme(self, name: str) -> str: ...

    @property
    def theme_names(self) -> list[str]: ...

    @property
    def theme(self) -> str: ...

    def notify(self, message: Any, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...

    def push_screen(self, screen: Screen[Any], callback: Callable[[Any], Any] | None = None,
                    ) -> Any: ...

    def run_worker(self, work: Awaitable[Any], *, group: str = "default",
                   exit_on_error: bool = True) -> Worker[Any]: ...

    def exit(self, result: Any = None, return_code: int = 0, message: Any = None) -> None: ...

