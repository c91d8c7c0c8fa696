"""Runs tests/tmux_smoke.sh: the installed app in a real terminal (skipped without tmux)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("tmux_smoke.sh")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_the_app_in_a_real_terminal_chats_compacts_and_shows_the_panel():
    picochat = Path(sys.executable).with_name("picochat")
    assert picochat.exists(), "install the project (README) so the picochat command exists"
    result = subprocess.run(["bash", str(SCRIPT), str(picochat)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "tmux smoke: all checks passed" in result.stdout
