"""The shell and the app say a failure in the same words: each only frames the line (the CLI's
`picochat: ` on stderr, the app's error notice), never words it again its own way."""

from __future__ import annotations

import pytest

import errno
import subprocess
import sys

from picochat.models import create_provider, resolve_model
from picochat.tui.app import PicochatApp
from picochat.tui.chat import Notice
from tests.helpers.cli import clean
from tests.helpers.config import configure
from tests.helpers.conversations import seed
from tests.helpers.tui import SIZE, make_app, say, texts
from tests.helpers.waiting import WAIT_S, settle
from tests.helpers.storage import append_message


# `picochat ARGS` with a disk that is full by the time the export is written
_FULL_DISK = """
import errno, sys
import picochat.fsutil

def full(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")

picochat.fsutil.atomic_write_text = full
from picochat.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _error_notices(app) -> list[str]:
    return [str(w.render()) for w in app.query(Notice) if w.has_class("error")]


async def test_a_failed_export_write_is_one_line_in_both(cli_store, tmp_path, monkeypatch):
    """A disk that fills while the export is written: the file and the reason, alike."""
    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("picochat.fsutil.atomic_write_text", full)
    target = tmp_path / "out.md"
    app = make_app(cli_store, name="s")
    append_message(cli_store, app.session.id, "user", "the canary host is cn-west-12",
                   turn_id="x1")
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, f"/export md {target}")
        await settle(pilot, app, lambda: _error_notices(app))
        [shown] = _error_notices(app)

    proc = subprocess.run([sys.executable, "-c", _FULL_DISK, "export", "--session", "s",
                           "--format", "md", "-o", str(target)],
                          capture_output=True, text=True, timeout=WAIT_S)
    [said] = proc.stderr.splitlines()

    line = f"{target}: cannot write the export: No space left on device"
    assert proc.returncode == 1 and said == f"picochat: {line}"
    assert shown == f"export failed: {line}"
    assert not target.exists()


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
async def test_a_failed_compaction_is_one_line_in_both(run_cli, keyed_fake, cli_store, config_file):
    """The chat model returns an empty summary to `/compact` and to `picochat compact`."""
    config = configure(config_file, keyed_fake, chat="fake", summary_model=None)
    session = cli_store.create_session("s")
    seed(cli_store, session.id, 10)
    keyed_fake.script_summary(("text", ""), ("text", ""))  # one for the app, one for the shell
    model = resolve_model(config, "fake")
    app = PicochatApp(cli_store, cli_store.session(session.id), model, create_provider(model),
                      config)
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "/compact")
        await settle(pilot, app, lambda: _error_notices(app))
        [shown] = _error_notices(app)
        assert not any("Nothing to compact" in t for t in texts(app, Notice))

    result = run_cli("compact", "--session", "s")
    clean(result)
    assert result.status == 1 and result.stderr == f"picochat: {shown}\n"
    assert shown.startswith("compaction failed: the model returned an empty summary")
