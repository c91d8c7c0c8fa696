"""Model output is untrusted: widgets get text through `clean`, and never as Rich markup.
`clean` lives in `picochat.textsafe`, below both front ends, so the CLI shows the same text."""

from __future__ import annotations

from picochat.textsafe import clean

__all__ = ["clean"]
