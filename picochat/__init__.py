"""picochat: a terminal chat client whose long conversations never hit the context wall.

Kept import-free on purpose: `picochat --version` reads `__version__` from here and must not
pull in litellm or textual.
"""

__version__ = "0.1.0"
