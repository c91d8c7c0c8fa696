"""picochat: a terminal chat client whose long conversations never hit the context wall.

Kept import-free on purpose: `picochat --version` reads `__version__` from here and must not
pull in litellm or textual.
"""

import logging as _logging

__version__ = "0.1.0"

# Until the CLI or app points it at the log file, picochat's logger says nothing anywhere.
_logging.getLogger("picochat").addHandler(_logging.NullHandler())
