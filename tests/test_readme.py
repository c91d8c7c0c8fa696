"""The README is what a newcomer has: every command line it shows parses, every slash command
it lists exists (and every one that exists is listed), every config it shows loads, and the
recipes for a server work against the fakes of those servers."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from picochat.cli.parser import build_parser
from picochat.config import load_config
from picochat.tui import slash

README = (Path(__file__).parent.parent / "README.md").read_text()
BLOCKS = re.findall(r"```(\w*)\n(.*?)```", README, re.S)
COMMAND = re.compile(r"(?<![\w/.-])picochat((?: (?:\"[^\"]*\"|[^\s|()<>\"'#`]+))*)")


def command_lines() -> list[str]:
    """`picochat …` in the shell blocks and in inline code, up to a pipe, a redirect or a
    comment."""
    found = []
    for lang, body in BLOCKS:
        if lang in ("", "sh", "bash", "shell"):
            for line in body.splitlines():
                found += [m.group(0) for m in COMMAND.finditer(line.split("#")[0])]
    for span in re.findall(r"`(picochat[^`]*)`", README):
        found += [m.group(0) for m in COMMAND.finditer(span)]
    return found


def toml_blocks() -> list[str]:
    return [body for lang, body in BLOCKS if lang == "toml"]


def recipe(marker: str) -> str:
    [body] = [b for b in toml_blocks() if marker in b]
    return body


def test_the_readme_shows_the_commands_a_newcomer_needs():
    lines = command_lines()
    for needed in ("picochat ask", "picochat config init", "picochat paths",
                   "picochat completion bash", "picochat info"):
        assert any(line.startswith(needed) for line in lines), needed


@pytest.mark.parametrize("line", command_lines())
def test_every_command_line_in_the_readme_parses(line, capsys):
    try:
        build_parser().parse_args(shlex.split(line)[1:])
    except SystemExit as exc:  # --help and --version exit 0; a bad flag exits 2
        assert exc.code == 0, f"{line!r}: {capsys.readouterr().err.strip()}"


def test_every_slash_command_is_in_the_readme_and_every_one_it_names_exists():
    named = set(re.findall(r"`/([a-z]+)", README))
    existing = {c.name for c in slash.COMMANDS}
    assert named - existing == set(), "the README names commands that do not exist"
    assert existing - named == set(), "commands the README does not list"


@pytest.mark.parametrize("body", toml_blocks())
def test_every_config_in_the_readme_loads(body, tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(body)
    load_config(path)  # raises a ConfigError naming the key and line otherwise


def write(config_file: Path, body: str) -> None:
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(body)


@pytest.mark.slow  # among the default run's slowest; CI runs -m slow
def test_the_openai_compatible_server_recipe_answers(run_cli, config_file, fake_openai):
    """The recipe as written, but at the fake server's address: no key, a chat."""
    body = recipe("http://127.0.0.1:8080/v1").replace("http://127.0.0.1:8080/v1",
                                                       fake_openai.base_url)
    write(config_file, body)
    fake_openai.script(("text", "hello from the server"))
    result = run_cli("ask", "hello", env={"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": ""})
    assert result.status == 0, result.stderr
    assert result.stdout.strip() == "hello from the server"
    assert fake_openai.requests[0]["model"] == "my-model"


def test_the_gateway_recipe_sends_the_key_its_variable_holds(run_cli, config_file, fake_openai):
    body = recipe("llm.example.com").replace("https://llm.example.com/v1", fake_openai.base_url)
    write(config_file, body)
    fake_openai.script(("text", "through the gateway"))
    result = run_cli("ask", "hello", env={"GATEWAY_KEY": "gw-secret-123456"})
    assert result.status == 0, result.stderr
    assert result.stdout.strip() == "through the gateway"
    assert fake_openai.headers[0]["authorization"] == "Bearer gw-secret-123456"


def test_the_ollama_recipe_answers_with_its_window(run_cli, config_file, fake_ollama):
    """The recipe with the fake's address as OLLAMA_HOST: native chat, num_ctx = token_limit."""
    fake_ollama.add_model("llama3.2")
    fake_ollama.script(("text", "hello from ollama"))
    write(config_file, recipe('"ollama/llama3.2"'))
    result = run_cli("ask", "hello", env={"OLLAMA_HOST": fake_ollama.host,
                                          "OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": ""})
    assert result.status == 0, result.stderr
    assert result.stdout.strip() == "hello from ollama"
    [chat] = fake_ollama.chat_requests
    assert chat["options"]["num_ctx"] == 8192


NOT_OURS = {"-c", "--max-model-len", "--enable-auto-tool-choice", "--jinja",  # servers
            "-wal", "-shm"}  # SQLite's files beside the database


def test_every_flag_the_readme_names_exists():
    named = set(re.findall(r"`(--?[a-z][\w-]*)(?: [A-Z]+)?`", README)) - NOT_OURS
    assert {"-s", "-m", "--verbose"} <= named
    parser = build_parser()
    known = set(parser._option_string_actions)
    for action in parser._subparsers._group_actions:  # each command's own flags
        for sub in action.choices.values():
            known |= set(sub._option_string_actions)
    assert named - known == set()


def test_every_file_the_readme_links_to_exists():
    """The pictures are the snapshot tests' own (kept current by them), the guides sit beside
    the code they describe."""
    from urllib.parse import unquote
    root = Path(__file__).parent.parent
    links = re.findall(r"\]\(([^)#]+)\)", README)
    local = [unquote(link) for link in links if "://" not in link]
    assert len(local) >= 6
    assert [link for link in local if not (root / link).is_file()] == []
