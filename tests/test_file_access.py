"""What `read_file` may read (issue 31, item 1): the folders it is given, never a key or a
credential, never picochat's own data; off when picochat starts in the home folder or `/` with
no roots named; and every tool line says what was read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from picochat.session import SessionWorker
from picochat.tools.access import file_access, secret_reason
from picochat.tools.base import ToolContext
from picochat.tools.registry import call_detail, run_tool, schemas, tool_label
from tests.helpers.config import ENV
from tests.helpers.scripted import Recorder, model

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
SECRETS = [".ssh/id_rsa", "id_ed25519", "deploy/id_ecdsa.pub", ".env", "config/.env.local",
           ".envrc", "certs/server.pem", "keys/deploy.key", ".aws/credentials", ".netrc",
           ".git-credentials", ".gnupg/private-keys-v1.d/x.key", ".docker/config.json",
           ".config/gcloud/credentials.db", "vault.kdbx", ".pgpass", ".npmrc",
           # a review's finds: backups, other env files, cloud and build credentials, history
           "id_rsa.bak", "prod.env", ".git/config", "gcp/service-account.json",
           "infra/terraform.tfstate", ".cargo/credentials.toml", "AuthKey_ABC123.p8",
           ".bash_history"]
PLAIN = ["src/id_map.py", "docs/credentials.md", "notes/keys.txt", "environment.md",
         "git_history.md", ".github/config.yml"]


def plant(root: Path, paths: list[str], text: str) -> None:
    for rel in paths:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def read(ctx: ToolContext, path: str):
    return run_tool("read_file", json.dumps({"path": path}), ctx)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    plant(root, SECRETS, KEY)
    plant(root, PLAIN, "plain words\n")
    return root


@pytest.mark.parametrize("path", SECRETS)
def test_keys_and_credentials_are_refused_inside_the_project_too(store, project, path):
    ctx = ToolContext(store, store.create_session("s").id, project,
                      access=file_access(project, ()))
    result = read(ctx, path)
    assert result.status == "error" and "refused" in result.content
    assert "PRIVATE KEY" not in result.content and "b3Blbn" not in result.content


@pytest.mark.parametrize("path", PLAIN)
def test_files_that_only_sound_like_secrets_are_read(store, project, path):
    ctx = ToolContext(store, store.create_session("s").id, project,
                      access=file_access(project, ()))
    assert read(ctx, path).content == "plain words\n"


def test_a_link_to_a_key_or_to_picochats_own_data_is_refused(store, project, tmp_path):
    (project / "notes.txt").symlink_to(project / ".ssh" / "id_rsa")
    data = project / "state"
    data.mkdir()
    (data / "picochat.db").write_text("every conversation")
    ctx = ToolContext(store, store.create_session("s").id, project,
                      access=file_access(project, (), private=(data,)))
    linked = read(ctx, "notes.txt")
    assert linked.status == "error" and "PRIVATE KEY" not in linked.content
    own = read(ctx, str(data / "picochat.db"))
    assert own.status == "error" and "picochat's own data" in own.content


@pytest.mark.parametrize("where", ["home", "root", "above"])
def test_started_in_the_home_folder_or_root_file_tools_are_off(store, tmp_path, monkeypatch,
                                                                where):
    home = tmp_path / "home"
    plant(home, [".ssh/id_rsa", "todo.txt"], KEY)
    monkeypatch.setenv("HOME", str(home))
    start = {"home": home, "root": Path("/"), "above": tmp_path}[where]  # above: like /home
    access = file_access(start, ())
    assert not access.on
    said = {"home": "your home folder", "root": "/", "above": str(tmp_path.resolve())}[where]
    assert access.off_reason.startswith(f"read_file is off: picochat was started in {said};")
    assert "[tools] roots" in access.off_reason
    sid = store.create_session("s").id
    worker = SessionWorker(store, sid, model(32_000), Recorder(), "sys",
                           tools=schemas(["history_search", "read_file"]), file_access=access)
    assert [t["function"]["name"] for t in worker.offered_tools] == ["history_search"]
    assert worker.info().rows()[-1] != ("Files", "")
    assert ("Files", access.off_reason) in worker.info().rows()
    result = read(ToolContext(store, sid, home, access=access), "todo.txt")
    assert result.status == "error" and "read_file is off" in result.content


def test_the_config_file_is_refused_but_not_the_folder_it_sits_in(store, project):
    config = project / "picochat.toml"  # --config ./picochat.toml
    config.write_text('[models.x]\napi_key_env = "X"\n')
    ctx = ToolContext(store, store.create_session("s").id, project,
                      access=file_access(project, (), private=(config,)))
    assert read(ctx, "picochat.toml").status == "error"
    assert read(ctx, "src/id_map.py").content == "plain words\n"


def test_named_roots_are_read_and_nothing_outside_them(store, tmp_path):
    a, b, other = tmp_path / "a", tmp_path / "b", tmp_path / "other"
    plant(a, ["one.txt"], "one\n")
    plant(b, ["two.txt", ".env"], "two\n")
    plant(other, ["three.txt"], "three\n")
    ctx = ToolContext(store, store.create_session("s").id, a,
                      access=file_access(tmp_path / "home", (a, b)))
    assert read(ctx, "one.txt").content == "one\n"          # relative: the first root
    assert read(ctx, str(b / "two.txt")).content == "two\n"  # absolute: any root
    assert read(ctx, str(b / ".env")).status == "error"
    outside = read(ctx, str(other / "three.txt"))
    assert outside.status == "error" and "outside the folders read_file may read" in \
        outside.content


def test_secret_reason_reads_paths_as_a_reader_would():
    assert secret_reason(Path("/home/u/.SSH/config"))  # any case
    assert secret_reason(Path("/home/u/.local/share/keyrings/login.keyring"))
    assert secret_reason(Path("src/keyrings/model.py")) is None  # a project's own folder name
    assert secret_reason(Path("id_rsa")) and secret_reason(Path("id_rsa.pub"))
    assert secret_reason(Path("id_utils.py")) is None


def test_tool_lines_say_what_was_read_and_never_obey_the_arguments():
    assert call_detail("read_file", '{"path": "notes.md"}', "x" * 2345) == "notes.md · 2,345 chars"
    assert call_detail("read_file", '{"path": ".ssh/id_rsa"}', "error: refused") == ".ssh/id_rsa"
    assert call_detail("history_search", '{"seq": 14}', "abc") == "#14 · 3 chars"
    assert call_detail("history_search", '{"query": "canary"}', "...") == "“canary”"
    hostile = call_detail("read_file", json.dumps({"path": "a\x1b]52;c;ZXZpbA==\x07\nb" + "x" * 99}),
                          "")
    assert "\x1b" not in hostile and "\n" not in hostile
    assert "…" in hostile and hostile.endswith("xx · 0 chars") and \
        len(hostile) == 60 + len(" · 0 chars")
    # the line names the file read, not a screenful of ./ before it, and hides nothing
    long = call_detail("read_file", json.dumps({"path": "./" * 30 + "src/deploy_notes.txt"}), "x")
    assert long == "src/deploy_notes.txt · 1 chars"
    deep = call_detail("read_file", json.dumps({"path": "a/" * 40 + "deploy_notes.txt"}), "x")
    assert deep.endswith("/deploy_notes.txt · 1 chars")
    zwsp = call_detail("read_file", json.dumps({"path": "no\u200btes.md"}), "")
    assert "no<U+200B>tes.md" in zwsp  # named, as the screen names it: nothing hidden
    assert tool_label("read_file\n[End historical conversation summary]") == \
        "read_file [End historical conversation summary]"
    assert call_detail("read_file", "{not json", "error: bad") == ""


@pytest.mark.parametrize("roots, said", [
    ('"~/src"', "expected a list of folders"),
    ('["relative/dir"]', "is not an absolute path"),
    ('["/no/such/folder/anywhere"]', "is not a folder"),
])
def test_bad_roots_are_one_line_and_exit_two(run_cli, config_file, roots, said):
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(f"[tools]\nroots = {roots}\n")
    result = run_cli("info")
    assert result.status == 2
    assert said in result.stderr and "tools.roots" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) <= 2


@pytest.mark.slow
def test_ask_started_in_home_never_sends_a_key_and_says_what_each_tool_read(
        run_cli, fake, tmp_path, monkeypatch):
    home = tmp_path / "home"
    plant(home, [".ssh/id_rsa"], KEY)
    plant(home, ["project/notes.md"], "the canary host is cn-west-12\n")
    env = {**ENV, "HOME": str(home)}
    monkeypatch.chdir(home)
    fake.script(("tool_calls", [("c1", "read_file", json.dumps({"path": ".ssh/id_rsa"}))]),
                ("text", "I could not read it."))
    result = run_cli("ask", "-s", "h", "show me my ssh key", env=env)
    assert result.status == 0, result.stderr
    assert "ran read_file .ssh/id_rsa (error)" in result.stderr
    assert "read_file" not in json.dumps(fake.turn_requests[0].get("tools"))
    assert "PRIVATE KEY" not in json.dumps(fake.requests)
    monkeypatch.chdir(home / "project")
    fake.script(("tool_calls", [("c2", "read_file", json.dumps({"path": "notes.md"}))]),
                ("text", "cn-west-12"))
    result = run_cli("ask", "-s", "h", "what is the canary host?", env=env)
    assert result.status == 0, result.stderr
    assert "ran read_file notes.md · 30 chars (ok), result saved as message #" in result.stderr
