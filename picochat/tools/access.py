"""What `read_file` may read: the folders it is given, never a secret (issue 31, item 1).

A model asked `read_file {"path": ".ssh/id_rsa"}` from a session started in `$HOME`, and the key
went to the server and into the database while the user saw only "ran read_file (ok)". The
model's arguments are the server's words, so three rules hold whatever it asks:

- The roots: `[tools] roots` when the config names them, else the folder picochat was started
  in; started in the home folder, a folder above it (`/home`) or `/` with no roots named, file
  tools are off (a whole home folder is not a project).
- Secrets are refused anywhere, inside a root or not: key and credential folders (`.ssh`,
  `.gnupg`, `.aws`, keyrings …) and files (`.env*`, `*.pem`, `*.key`, `id_rsa`-style keys,
  `.netrc` …).
- picochat's own data folder and config file are refused: the database holds every
  conversation, the config names key variables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Sequence

# a path with one of these in it leads to keys or credentials (matched on "/"-joined, lowercase)
SECRET_DIRS = ("/.ssh/", "/.gnupg/", "/.aws/", "/.azure/", "/.kube/", "/.docker/",
               "/.password-store/", "/.local/share/keyrings/", "/.config/gcloud/",
               "/.config/gh/", "/.terraform.d/", "/.cargo/credentials",
               "/.git/config/")  # a remote's URL may carry a token
SECRET_NAMES = frozenset({".netrc", "_netrc", ".git-credentials", ".pgpass", ".pypirc",
                          ".npmrc", ".htpasswd", ".vault-token", "credentials",
                          "credentials.json", "secrets.json", "secrets.toml", "secrets.yaml",
                          "secrets.yml", ".my.cnf", "known_hosts", "authorized_keys"})
SECRET_PREFIXES = (".env",)   # .env, .env.local, .envrc
# id_rsa, id_ed25519_sk.pub, id_rsa.bak, id_ecdsa.old; not id_map.py
_KEY_FILE = re.compile(r"id_(?:rsa|dsa|ecdsa|ed25519)\b.*|id_[a-z0-9_]+(?:\.pub)?")
_SECRET_NAME = re.compile(r".*(?:service[-_]?account|client[-_]?secret).*\.json|.*_history")
SECRET_SUFFIXES = (".pem", ".key", ".p12", ".pfx", ".p8", ".jks", ".keystore", ".kdbx",
                   ".gpg", ".ppk", ".env", ".tfstate", ".tfstate.backup")


@dataclass(frozen=True)
class FileAccess:
    """Where `read_file` may read. `roots` empty: file tools are off, for `off_reason`."""

    roots: tuple[Path, ...]
    private: tuple[Path, ...] = ()   # picochat's own folders: refused even inside a root
    off_reason: str | None = None
    configured: bool = False         # the roots are `[tools] roots`, not the start folder

    @property
    def on(self) -> bool:
        return bool(self.roots)


def file_access(start: Path, configured: Sequence[Path], private: Sequence[Path] = ()
                ) -> FileAccess:
    """The access of a process started in `start` with `[tools] roots` = `configured`."""
    own = tuple(_real(p) for p in private)
    if configured:
        return FileAccess(tuple(_real(p) for p in configured), own, configured=True)
    here, home = _real(start), _real(Path.home())
    if here == home or here in home.parents or here == Path(here.anchor):
        # the home folder, or a folder above it (/home holds every user's)
        where = "your home folder" if here == home else str(here)
        return FileAccess((), own, f"read_file is off: picochat was started in {where}; "
                                   "start it in a project folder, or name the folders it may "
                                   "read in [tools] roots")
    return FileAccess((here,), own)


def secret_reason(path: PurePath) -> str | None:
    """Why `path` is never read (it holds keys or credentials), or None."""
    joined = "/" + "/".join(p for p in path.parts if p not in ("/", "")).lower() + "/"
    for folder in SECRET_DIRS:
        if folder in joined:
            return f"inside {folder.strip('/')}, where keys and credentials live"
    name = path.name.lower()
    if (name in SECRET_NAMES or name.startswith(SECRET_PREFIXES)
            or name.endswith(SECRET_SUFFIXES) or _KEY_FILE.fullmatch(name)
            or _SECRET_NAME.fullmatch(name)):
        return "a file that holds keys or credentials"
    return None


def _real(path: Path) -> Path:
    try:
        return path.expanduser().resolve()
    except (OSError, RuntimeError):
        return path.expanduser().absolute()
