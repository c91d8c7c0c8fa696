"""The provider seam: one async interface that streams typed events and raises typed errors."""

from picochat.providers.base import (
    Finish,
    Provider,
    ProviderRequest,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
)

__all__ = ["Finish", "Provider", "ProviderRequest", "StreamEvent", "TextDelta",
           "ToolCallDelta", "Usage"]
