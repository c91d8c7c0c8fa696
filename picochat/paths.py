"""Where picochat keeps its files (DESIGN.md, contract "Files and locations").

Resolved once per process from flags, then environment, then platformdirs; nothing here creates
a directory until a caller asks to write.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

APP = "picochat"


@dataclass(frozen=True)
class Paths:
    data_dir: Path
    config_file: Path
    log_file: Path
    cache_dir: Path | None = None  # files that only save time (the tokenizer's rank table)

    @property
    def database(self) -> Path:
        return self.data_dir / "picochat.db"

    @property
    def config_dir(self) -> Path:
        return self.config_file.parent

    @property
    def user_themes_dir(self) -> Path:
        return self.config_dir / "themes"


def resolve_paths(data_dir: str | None = None, config_file: str | None = None) -> Paths:
    """Flags beat environment variables, which beat the platform defaults."""
    import platformdirs

    env_data = os.environ.get("PICOCHAT_DATA_DIR")
    if data_dir:
        data = Path(data_dir).expanduser()
    elif env_data:
        data = Path(env_data).expanduser()
    else:
        data = Path(platformdirs.user_data_dir(APP))

    env_config = os.environ.get("PICOCHAT_CONFIG_DIR")
    if config_file:
        config = Path(config_file).expanduser()
    elif env_config:
        config = Path(env_config).expanduser() / "config.toml"
    else:
        config = Path(platformdirs.user_config_dir(APP)) / "config.toml"

    if data_dir or env_data:
        log = data / "picochat.log"
    else:
        log = Path(platformdirs.user_log_dir(APP)) / "picochat.log"
    cache = data / "cache" if data_dir or env_data else Path(platformdirs.user_cache_dir(APP))
    return Paths(data_dir=data, config_file=config, log_file=log, cache_dir=cache)
