"""What the CLI tests share: running a console script in-process, its one-line errors, and the
commands and Python snippets of a docs page (for the tests that run each of them)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def blocks(page: str, language: str) -> list[str]:
    """The fenced blocks of ``language`` in ``docs/<page>``, in order."""
    text = (DOCS / page).read_text()
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def commands(page: str) -> list[list[str]]:
    """Every command line of the page's ``bash`` blocks, split as the shell would (comments dropped)."""
    return [shlex.split(line, comments=True) for block in blocks(page, "bash")
            for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def run_cli(command, argv: list[str], capsys) -> tuple[int, str, str]:
    """A console script's function run in-process: its exit status, stdout and stderr."""
    status = command(argv)
    out, err = capsys.readouterr()
    return status, out, err


def one_line(err: str) -> str:
    """The one line a user's mistake prints (no traceback, nothing else)."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]
