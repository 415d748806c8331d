"""The recorded episodes ``arena-view`` shows: found under a path, listed, and handed out one by one.

The page loads its data as scripts (``data/index.js``, then ``data/episode-N.js`` when an
episode is opened), so that the same files work served from 127.0.0.1 and opened from a
static export on disk, where a browser refuses to ``fetch`` local files. Recordings are
shared, so a line is never handed out as code: each script is a fixed call whose only
argument is a JavaScript string holding the episode parsed and written again as JSON
(:func:`script_string`), which the page reads with ``JSON.parse``.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PATTERNS = ("*.jsonl", "*.jsonl.gz")


def recording_files(path: str | Path) -> list[Path]:
    """The recording files at ``path``: the file itself, or every ``*.jsonl[.gz]`` under a directory."""
    path = Path(path)
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(p for pattern in PATTERNS for p in path.rglob(pattern))
    raise FileNotFoundError(f"{path}: no such file or directory")


def error_class(error: str | None) -> str:
    """``"APIError: ..."`` -> ``"APIError"``; no error -> ``"none"``."""
    return error.split(":", 1)[0].strip() or "error" if error else "none"


@dataclass
class Episodes:
    """Every episode under some paths: their lines, and a summary of each for the list."""

    lines: list[bytes]
    index: list[dict[str, Any]]

    @classmethod
    def load(cls, paths: list[str | Path]) -> Episodes:
        lines: list[bytes] = []
        index: list[dict[str, Any]] = []
        for file in (f for p in paths for f in recording_files(p)):
            opener = gzip.open if file.suffix == ".gz" else open
            with opener(file, "rb") as fh:
                for raw in fh:
                    if not raw.strip():
                        continue
                    episode = outline(raw)
                    if episode is None:
                        continue  # transcripts.jsonl and other JSON lines that are not recordings
                    index.append(summary(len(lines), episode, file))
                    lines.append(raw.strip())
        if not lines:
            raise ValueError(f"no recorded episodes in {', '.join(map(str, paths))} (record them with "
                             "RecordEpisodes, arena-eval --record or arena-agent --record)")
        return cls(lines, index)

    def index_script(self) -> bytes:
        return b"arenaIndex(" + script_string(self.index) + b");\n"

    def episode_script(self, number: int) -> bytes:
        """``arenaEpisode(N, "<the episode as JSON>")``, or ``arenaEpisode(N, null, "<why not>")`` for a
        line that is not JSON (only its header and summary were read for the list)."""
        try:
            episode = parse_json(self.lines[number])
            if not isinstance(episode, dict):
                raise ValueError("not a JSON object")
            arguments = script_string(episode)
        except (ValueError, RecursionError) as error:
            why = f"episode {number} is not a valid recording line ({type(error).__name__}: {str(error)[:200]})"
            arguments = b"null," + string_literal(why)
        return b"arenaEpisode(" + str(number).encode() + b"," + arguments + b");\n"


def _finite_or_none(text: str) -> float | None:
    number = float(text)
    return number if math.isfinite(number) else None


def parse_json(text: bytes | str) -> Any:
    """JSON as a recorder writes it: NaN, Infinity and overflowing numbers read as null (``jsonable``
    writes them so), since the page's ``JSON.parse`` knows none of them."""
    return json.loads(text, parse_float=_finite_or_none, parse_constant=lambda _: None)


# what JSON leaves as is but must not reach a page as is: "<", ">" and "&" could end or open a tag
# wherever the string is pasted into HTML, and U+2028/2029 end a line in older JavaScript
_UNSAFE_IN_SCRIPT = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_string(value: Any) -> bytes:
    """``value`` as JSON inside a JavaScript string literal: data, never code, wherever the page puts it.
    The value is written again (nothing of the recorded bytes survives as written)."""
    return string_literal(json.dumps(value, separators=(",", ":"), allow_nan=False))


def string_literal(text: str) -> bytes:
    """``text`` as a JavaScript string literal: ASCII only, its quotes and backslashes escaped, so that
    it cannot end the literal or the script it stands in."""
    literal = json.dumps(text)
    return re.sub("[<>&\u2028\u2029]", lambda match: _UNSAFE_IN_SCRIPT[match[0]], literal).encode("ascii")


def outline(line: bytes) -> dict[str, Any] | None:
    """An episode's header and summary, without parsing its ticks (most of the line): the header
    is what comes before ``"world"``, the summary what follows the last ``"summary"`` key
    (a recorder writes them in that order). A line in another order is parsed whole; one
    that is not a recording (or cut short by a run killed mid-write) gives None."""
    world, summary = line.find(b',"world":'), line.rfind(b',"summary":{')
    try:
        if line.startswith(b'{"format":"arena-episode/') and 0 < world < summary:
            return {**parse_json(line[:world] + b"}"), **parse_json(b"{" + line[summary + 1:]), "ticks": True}
        episode = parse_json(line)
    except (ValueError, RecursionError):
        return None
    return episode if isinstance(episode, dict) and "ticks" in episode else None


def summary(number: int, episode: dict[str, Any], file: Path) -> dict[str, Any]:
    """One row of the episode list."""
    result = episode.get("summary") or {}
    world_return = result.get("return")
    return {
        "id": number, "file": file.name, "scenario": episode.get("scenario"), "seed": episode.get("seed"),
        "agent": episode.get("agent"), "source": episode.get("source"), "success": result.get("success"),
        "score": result.get("score"), "length": result.get("length"),
        "return": world_return[0] if isinstance(world_return, list) and world_return else world_return,
        "error": result.get("error"), "error_class": error_class(result.get("error")),
        "llm": "transcript" in episode,
    }
