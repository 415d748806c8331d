"""docs/guide/llm-transcripts.md runs as written: its Python blocks, and its commands through their real
entry points (the scripted server as ``python -m``, arena-agent's ``main()``) on a free port."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from llm_helpers import validate_transcript
from process_helpers import free_port

from arena_envs.llm.cli import main

DOC = Path(__file__).resolve().parents[1] / "docs" / "guide" / "llm-transcripts.md"
TEXT = DOC.read_text()


def blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", TEXT, re.S)


def test_the_python_blocks_run(capsys):
    for block in blocks("python"):
        exec(compile(block, str(DOC), "exec"), {})
    printed = capsys.readouterr().out
    assert "messages[1]: rule 'tool-answers-call'" in printed and "1 tool-answers-call" in printed



@pytest.fixture
def docs_server():
    (command,) = re.findall(r"`(python -m arena_envs\.llm\.server --port 8000)`", TEXT)
    port = free_port()
    argv = shlex.split(command.replace("8000", str(port)))
    process = subprocess.Popen([sys.executable, *argv[1:]], stdout=subprocess.PIPE, text=True)
    try:
        assert "serving the scripted model" in process.stdout.readline()
        yield port
    finally:
        process.terminate()
        process.wait(30)


def test_the_commands_run(docs_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    commands = [line[2:] for block in blocks("console") for line in block.splitlines() if line.startswith("$ ")]
    assert len(commands) == 2
    for command in commands:
        argv = shlex.split(command.replace("127.0.0.1:8000", f"127.0.0.1:{docs_server}"))
        assert argv[0] == "arena-agent"
        assert main(argv[1:]) == 0, command
        out = tmp_path / argv[argv.index("--out") + 1]
        records = [json.loads(line) for line in (out / "transcripts.jsonl").read_text().splitlines()]
        assert records and all(record["error"] is None for record in records)
        for record in records:
            validate_transcript(record["messages"])
    hunt = json.loads((tmp_path / "runs/hunt-hermes/transcripts.jsonl").read_text().splitlines()[0])
    assert "You have 12 turns" in hunt["messages"][0]["content"] and hunt["success"]
