"""Run an agent over seeded chat episodes, concurrently, and keep what happened.

    records = await run_episodes(ChatPool("arena_envs/TreasureHunt-v0", size=32), agent,
                                 seeds=range(64), group_size=4, concurrency=32)
    print(results_table(records))
    write_transcripts(records, "runs/agent/transcripts.jsonl")

Each :class:`EpisodeRecord` holds the OpenAI messages, the return, success and score, the
per-turn parse telemetry, token usage, per-request latency and finish reason, and the error
that stopped it with its class (a failing model stops its own episode only). With
``group_size`` G every seed is played G times (GRPO groups) and each episode gets its
group-relative advantage: its return minus the group's mean, over the group's standard
deviation (0 when all are equal).

:class:`RunDirectory` is ``arena-agent``'s output directory: records appended as episodes end,
resumable, summarised at the end (see docs/guide/llm-runner.md).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from arena_envs.llm.chat import ChatPool


@dataclass
class EpisodeRecord:
    """One played episode (a line of ``transcripts.jsonl``; ``results.jsonl`` has it without
    ``messages`` and ``tools``)."""

    scenario: str
    seed: int
    group: int
    index: int  # position within its group
    agent: str | None = None  # the chat agent, in a multi-agent scenario
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    score: float = 0.0
    turns: int = 0
    steps: int = 0  # ticks of the world
    formats: dict[str, int] = field(default_factory=dict)  # turns by detected format ("none": parse failures)
    parse_statuses: dict[str, int] = field(default_factory=dict)  # turns by parse status (parsers.PARSE_STATUSES)
    unreadable_calls: int = 0
    invalid_calls: dict[str, int] = field(default_factory=dict)  # by error code
    usage: dict[str, int] = field(default_factory=dict)
    retries: int = 0
    error: str | None = None
    error_class: str | None = None  # one of agents.ERROR_CLASSES when ``error`` is set
    advantage: float | None = 0.0  # None while its group is incomplete
    model: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    finish_reasons: list[str | None] = field(default_factory=list)  # per model request
    latencies: list[float] = field(default_factory=list)  # seconds per model request, from when it was sent
    tokens_per_second: float | None = None  # completion tokens over the requests' time
    wall_seconds: float = 0.0

    @property
    def parse_failures(self) -> int:
        return self.formats.get("none", 0)

    @property
    def key(self) -> tuple[int, int]:
        """(seed, index within the group): what ``--resume`` recognises as played."""
        return self.seed, self.index

    def to_json(self, *, transcript: bool = True) -> dict[str, Any]:
        line = asdict(self)
        line["parse_failures"] = self.parse_failures
        if not transcript:
            del line["messages"], line["tools"]
        return line

    @classmethod
    def from_json(cls, line: dict[str, Any]) -> EpisodeRecord:
        names = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in line.items() if key in names})


#: Fields that differ between two plays of the same episode only by when and how fast they ran.
TIMING_FIELDS = ("latencies", "tokens_per_second", "wall_seconds")


class _Tally:
    """What an episode's replies and steps add up to, written into its record at the end."""

    def __init__(self, record: EpisodeRecord, agent: Any):
        self.record, self.start = record, time.perf_counter()
        record.model = getattr(agent, "model", None) or getattr(agent, "name", None)
        record.sampling = dict(getattr(agent, "sampling", {}) or {})
        self.usage: Counter[str] = Counter()
        self.formats: Counter[str] = Counter()
        self.invalid: Counter[str] = Counter()

    def reply(self, reply: Any) -> bool:
        """Count a reply; False (and the error recorded) when it brought no message."""
        record = self.record
        self.usage.update(reply.usage)
        record.retries += reply.retries
        for request in getattr(reply, "requests", ()):  # failed attempts too: their finish_reason is None
            record.latencies.append(request["latency"])
            record.finish_reasons.append(request.get("finish_reason"))
        if reply.message is None:
            record.error = reply.error or "the agent gave no reply"
            record.error_class = getattr(reply, "error_class", None) or "internal"
            return False
        return True

    def step(self, info: dict[str, Any]) -> None:
        self.formats[info["format"]] += 1
        statuses = self.record.parse_statuses
        statuses[info["parse_status"]] = statuses.get(info["parse_status"], 0) + 1
        self.record.unreadable_calls += info["calls_unreadable"]
        self.invalid.update(entry["code"] for entry in info["invalid"])

    def failed(self, error: BaseException) -> None:
        if self.record.error is None:
            self.record.error = f"{type(error).__name__}: {error}"[-1000:]
            self.record.error_class = "internal"

    def finish(self, session: Any) -> None:
        record = self.record
        record.messages, record.reward = list(session.messages), session.episode_return
        record.success = bool(session.last_info.get("success", False))
        record.score = float(session.last_info.get("score", 0.0) or 0.0)
        record.turns, record.steps = session.turn, session.ticks
        record.formats, record.invalid_calls, record.usage = dict(self.formats), dict(self.invalid), dict(self.usage)
        seconds = sum(latency for latency in record.latencies if latency)
        completion = record.usage.get("completion_tokens", 0)
        record.tokens_per_second = round(completion / seconds, 3) if completion and seconds else None
        record.wall_seconds = round(time.perf_counter() - self.start, 6)


async def run_episode(pool: ChatPool, agent: Any, seed: int, group: int = 0, index: int = 0) -> EpisodeRecord:
    """Play one episode of ``pool``'s scenario with ``agent``; never raises for what the model does."""
    session = pool.session()
    tally = _Tally(EpisodeRecord(pool.scenario, seed, group, index), agent)
    try:
        # the transcript the agent reads: the runner's copy, each message copied once as it comes, in a
        # list of the agent's own each turn (the messages in it are shared between turns)
        shown, tools = await session.reset(seed)
        tally.record.tools = tools
        while not session.done:
            reply = await agent.reply(list(shown), tools, episode=f"{seed}/{index}")
            if not tally.reply(reply):
                break
            tally.step((await session.step(reply.message)).info)
            shown += session.messages_from(len(shown))
    except Exception as error:  # an episode's failure is recorded, never shared with the others
        tally.failed(error)
    finally:
        tally.finish(session)
        session.error = tally.record.error  # for a recording backend, which writes the episode at close
        await session.close()
    return tally.record


def other_teams(others: str, seed: int = 0, options: Mapping[str, Any] | None = None) -> list[Any]:
    """The controllers of Team Capture's agents that do not chat, as ``--others`` names them
    (see :func:`run_team_episode`); ``options`` are the match's (its env arguments matter)."""
    from arena_envs.llm.chat import ChatOptions
    from arena_envs.llm.team import pretrained_team, scripted_team
    from arena_envs.pretrained import is_pretrained

    if others == "scripted":
        return [scripted_team("blue"), scripted_team("red")]
    if others == "idle":
        return []
    if is_pretrained(others):
        env_kwargs = {k: v for k, v in (options or {}).items() if k != "recording"}
        ChatOptions.pop(env_kwargs)
        return [pretrained_team(team, others, seed=seed, **env_kwargs) for team in ("blue", "red")]
    raise ValueError(f"--others must be scripted, idle or a pretrained policy (pretrained, "
                     f"pretrained:team_capture, an exported .npz), got {others!r}")


async def run_team_episode(agent: Any, seed: int, group: int = 0, index: int = 0, *,
                           chat_agents: Iterable[str] = ("blue_agent_1",), others: str = "scripted",
                           **options: Any) -> list[EpisodeRecord]:
    """One Team Capture match with ``chat_agents`` played by ``agent`` (their replies asked together)
    and the other agents ``"scripted"`` (the scripted team), ``"idle"`` or a shipped policy
    (``"pretrained"``, ``"pretrained:team_capture"``, an exported ``.npz``); one record per chat
    agent. ``options``: chat options, ``team_capture_v0.parallel_env`` arguments and
    :class:`TeamChat`'s ``recording``."""
    from arena_envs.llm.team import TeamChat

    match = TeamChat(list(chat_agents), other_teams(others, seed, options), **options)
    names = list(match.sessions)
    tallies = {name: _Tally(EpisodeRecord("TeamCapture", seed, group, index, agent=name), agent) for name in names}
    try:
        openings = await match.areset(seed)
        shown = {name: messages for name, (messages, _tools) in openings.items()}  # as in run_episode
        for name, (_messages, tools) in openings.items():
            tallies[name].record.tools = tools
        while not match.done:
            live = [name for name in names if not match.sessions[name].done]
            for name in live:
                shown[name] += match.sessions[name].messages_from(len(shown[name]))
            replies = await asyncio.gather(*(agent.reply(list(shown[n]), match.sessions[n].tools,
                                                         episode=f"{seed}/{index}/{n}") for n in live))
            answered = [tallies[name].reply(reply) for name, reply in zip(live, replies, strict=True)]
            if not all(answered):
                break
            steps = await match.astep({n: r.message for n, r in zip(live, replies, strict=True)})
            for name, step in steps.items():
                tallies[name].step(step.info)
    except Exception as error:  # the match's failure is its own
        for tally in tallies.values():
            tally.failed(error)
    finally:
        match.close({name: tally.record.error for name, tally in tallies.items()})
    for name, tally in tallies.items():
        tally.finish(match.sessions[name])
    return [tally.record for tally in tallies.values()]


async def run_episodes(pool: ChatPool | None, agent: Any, seeds: Iterable[int], *, group_size: int = 1,
                       concurrency: int = 32, progress: Callable[[EpisodeRecord], None] | None = None,
                       team: dict[str, Any] | None = None,
                       skip: Collection[tuple[int, int]] = ()) -> list[EpisodeRecord]:
    """Every seed played ``group_size`` times, at most ``concurrency`` episodes at once; records in
    (seed, index) order, with group-relative advantages.

    ``progress`` is called with each record the moment its episode ends (the place to write it
    down: if the run is cancelled, the episodes in flight are abandoned and only those records
    exist). ``skip``: (seed, index) pairs not to play, already played by an earlier run.

    ``pool`` gives the sessions of a single-agent scenario; for Team Capture pass ``pool=None``
    and ``team`` (the keywords of :func:`run_team_episode`): each match gives one record per chat agent.
    """
    if group_size < 1 or concurrency < 1:
        raise ValueError("group_size and concurrency must be at least 1")
    if (pool is None) == (team is None):
        raise ValueError("give either a ChatPool or the team options")
    skip = set(skip)
    jobs = [(seed, group, index) for group, seed in enumerate(seeds) for index in range(group_size)
            if (seed, index) not in skip]
    limit = asyncio.Semaphore(concurrency)

    async def one(seed: int, group: int, index: int) -> list[EpisodeRecord]:
        async with limit:
            if pool is not None:
                played = [await run_episode(pool, agent, seed, group, index)]
            else:
                played = await run_team_episode(agent, seed, group, index, **team)
        if progress is not None:
            for record in played:
                progress(record)
        return played

    records = [record for played in await asyncio.gather(*(one(*job) for job in jobs)) for record in played]
    add_advantages(records)
    return records


def add_advantages(records: list[EpisodeRecord], group_members: int | None = None) -> None:
    """Group-relative advantages, as GRPO uses them: (return - group mean) / group std (0 if flat).
    With ``group_members``, a group with fewer records (a run stopped halfway) gets None."""
    for members in _groups(records).values():
        if group_members is not None and len(members) < group_members:
            for member in members:
                member.advantage = None
            continue
        rewards = [m.reward for m in members]
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        for member in members:
            member.advantage = (member.reward - mean) / std if std > 1e-8 else 0.0


def _groups(records: Iterable[EpisodeRecord]) -> dict[int, list[EpisodeRecord]]:
    groups: dict[int, list[EpisodeRecord]] = {}
    for record in records:
        groups.setdefault(record.group, []).append(record)
    return groups


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from n tries with c successes (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def summary(records: list[EpisodeRecord], group_size: int = 1) -> dict[str, Any]:
    """The numbers of the results table."""
    n = len(records)
    if n == 0:
        return {"episodes": 0}
    formats: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    invalid: Counter[str] = Counter()
    usage: Counter[str] = Counter()
    finish: Counter[str] = Counter()
    for record in records:
        formats.update(record.formats)
        statuses.update(record.parse_statuses)
        invalid.update(record.invalid_calls)
        usage.update(record.usage)
        finish.update(str(reason) for reason in record.finish_reasons)
    latencies = sorted(latency for record in records for latency in record.latencies if latency is not None)
    out: dict[str, Any] = {
        "episodes": n,
        "success": sum(r.success for r in records) / n,
        "score": sum(r.score for r in records) / n,
        "return": sum(r.reward for r in records) / n,
        "steps": sum(r.steps for r in records) / n,
        "turns": sum(r.turns for r in records) / n,
        "errors": sum(r.error is not None for r in records),
        "error_classes": dict(Counter(r.error_class or "internal" for r in records if r.error is not None)),
        "parse_failures": formats.get("none", 0),
        "turns_by_format": dict(formats),
        "turns_by_parse_status": dict(statuses),
        "unreadable_calls": sum(r.unreadable_calls for r in records),
        "invalid_calls": dict(invalid),
        "tokens": dict(usage),
        "finish_reasons": dict(finish),
        "requests": len(latencies),
        "latency_median": statistics.median(latencies) if latencies else None,
        "latency_p95": latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))] if latencies else None,
        "tokens_per_second": (round(usage["completion_tokens"] / sum(latencies), 3)
                              if usage.get("completion_tokens") and sum(latencies) else None),
        "wall_seconds_per_episode": sum(r.wall_seconds for r in records) / n,
        "retries": sum(r.retries for r in records),
    }
    if group_size > 1:
        groups = _groups(records)
        for k in sorted({1, group_size}):
            passed = (pass_at_k(len(g), sum(m.success for m in g), k) for g in groups.values())
            out[f"pass@{k}"] = sum(passed) / len(groups)
        flat = sum(max(m.reward for m in g) - min(m.reward for m in g) <= 1e-8 for g in groups.values())
        out["groups"], out["zero_spread_groups"] = len(groups), flat / len(groups)
    return out


def zero_spread_warning(summary_: dict[str, Any]) -> str | None:
    """One line when no GRPO group has any reward spread (every advantage 0: nothing to learn from)."""
    if summary_.get("groups") and summary_.get("zero_spread_groups") == 1.0:
        return (f"warning: all {summary_['groups']} groups have zero reward spread: every advantage is 0, "
                "so a GRPO step on them learns nothing (more episodes per group, a higher temperature, "
                "or a reward that separates the tries)")
    return None


def results_table(records: list[EpisodeRecord], group_size: int = 1) -> str:
    """The results as an aligned text table."""
    s = summary(records, group_size)
    if not s["episodes"]:
        return "no episodes"
    rows = [("episodes", str(s["episodes"])), ("success", f"{s['success']:.1%}"), ("score", f"{s['score']:.2f}"),
            ("return", f"{s['return']:.3f}"), ("steps", f"{s['steps']:.1f}"), ("turns", f"{s['turns']:.1f}")]
    rows += [(key, f"{s[key]:.1%}") for key in s if key.startswith("pass@")]
    if "groups" in s:
        rows.append(("zero-spread groups", f"{s['zero_spread_groups']:.1%} of {s['groups']}"))
    rows += [("turns by format", _counts(s["turns_by_format"])),
             ("parse failures", str(s["parse_failures"])),
             ("turns by parse status", _counts(s["turns_by_parse_status"])),
             ("unreadable calls", str(s["unreadable_calls"])),
             ("invalid calls", _counts(s["invalid_calls"]) or "0"),
             ("tokens", _counts(s["tokens"]) or "not reported"),
             ("finish reasons", _counts(s["finish_reasons"]) or "none"),
             ("requests", str(s["requests"]))]
    if s["latency_median"] is not None:
        rows.append(("latency", f"median {s['latency_median']:.3f} s, p95 {s['latency_p95']:.3f} s"))
    if s["tokens_per_second"] is not None:
        rows.append(("tokens/s", f"{s['tokens_per_second']:.1f} (completion tokens per request second)"))
    rows += [("time per episode", f"{s['wall_seconds_per_episode']:.2f} s"),
             ("retries", str(s["retries"])),
             ("errors", str(s["errors"]))]
    if s["error_classes"]:
        rows.append(("errors by class", _counts(s["error_classes"])))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{key} {value}" for key, value in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


#: Below this first-answer latency, the run's own turnaround (our event loop, the client's first
#: call) weighs as much as the server's work: :func:`server_parallelism` does not judge.
MIN_JUDGED_LATENCY = 0.2


def server_parallelism(request_log: list[tuple[float, float]]) -> float | None:
    """About how many requests the server answers at once, from ``(sent, answered)`` times of the
    run's requests (``OpenAIChatAgent.request_log``); None when the log cannot tell.

    Judged on the run's first burst: the m >= 3 requests sent before the first answer came back
    (every episode sends its first request at once). A server that answers one at a time returns
    them one service time apart, the first after one: (m - 1) * first / (last - first) ~ 1. A server
    that answers them together returns them together: the estimate grows without bound. (In the
    steady state that follows, latency = requests in flight / throughput either way, Little's law,
    so it cannot tell.) None with a burst under 3 requests or a first answer under
    :data:`MIN_JUDGED_LATENCY` seconds.
    """
    if not request_log:
        return None
    first_answer = min(answered for _, answered in request_log)
    burst = [(sent, answered) for sent, answered in request_log if sent < first_answer]
    if len(burst) < 3:
        return None
    start = min(sent for sent, _ in burst)
    ends = sorted(answered - start for _, answered in burst)
    if ends[0] < MIN_JUDGED_LATENCY:
        return None
    spread = ends[-1] - ends[0]
    return (len(burst) - 1) * ends[0] / spread if spread > 0 else math.inf


def one_at_a_time_warning(concurrency: int, measured: float | None, documented: int | None) -> str | None:
    """One line when ``concurrency`` > 1 meets a server that answers one request at a time
    (measured by :func:`server_parallelism` below 1.5, or documented as one slot)."""
    if concurrency <= 1:
        return None
    if documented == 1:
        why = "the server is known to have a single slot"
    elif measured is not None and measured < 1.5:
        why = f"measured: the first {concurrency} requests came back one by one, about {measured:.1f} at once"
    else:
        return None
    return (f"warning: the server answers one request at a time ({why}); --concurrency {concurrency} only "
            "queues requests in it. Use --concurrency 1, or start the server with more parallel slots "
            "(llama.cpp's llama-server: --parallel N)")


class RunDirectory:
    """An ``arena-agent`` output directory: records appended the moment episodes end, a summary at the end.

    ``transcripts.jsonl`` holds whole records, ``results.jsonl`` the same without messages and
    tools; each line is written in one piece and flushed. ``run.json`` is the run's
    configuration; ``resume=True`` reopens a directory of the same configuration, keeps its
    finished episodes (those ended by an error a later try may not meet, :data:`RERUN_CLASSES`,
    are dropped and played again) and a torn last line, if a killed process left one.
    ``finish`` rewrites both files in (group, index) order with group advantages and writes
    ``results.json`` (the summary) and ``results.txt`` (the table).
    """

    TRANSCRIPTS, RESULTS, CONFIG = "transcripts.jsonl", "results.jsonl", "run.json"
    SUMMARY, TABLE = "results.json", "results.txt"
    #: Error classes of episodes that ``resume`` plays again: the server was away, slow or failing.
    RERUN_CLASSES = frozenset({"connection", "timeout", "rate_limited", "server_error"})

    def __init__(self, path: str | Path, config: dict[str, Any], *, resume: bool = False, overwrite: bool = False):
        self.path, self.config = Path(path), config
        self.path.mkdir(parents=True, exist_ok=True)
        transcripts, saved = self.path / self.TRANSCRIPTS, self.path / self.CONFIG
        self.records: list[EpisodeRecord] = []
        held = transcripts.exists() and transcripts.stat().st_size > 0
        if resume and saved.exists():
            before = json.loads(saved.read_text())
            changed = sorted(k for k in set(before) | set(config) if before.get(k) != config.get(k))
            if changed:
                raise ValueError(f"{self.path} holds a run with other settings ({', '.join(changed)}); "
                                 "resume it with the same arguments, or use another --out")
            records = self._read(transcripts)
            again = {r.key for r in records if r.error_class in self.RERUN_CLASSES}  # a whole match, in Team Capture
            self.records = [r for r in records if r.key not in again]
        elif resume and held:
            raise ValueError(f"{self.path} holds episodes but no {self.CONFIG}: not a run that can be resumed")
        elif held and not overwrite:
            raise ValueError(f"{self.path} already holds a run; --resume completes it, --overwrite replaces it")
        # (--resume in a directory without a run starts one: a script may pass it every time)
        self._rewrite(self.records)
        saved.write_text(json.dumps(config, indent=2) + "\n")
        self._files = [(transcripts.open("a", encoding="utf-8"), True),
                       ((self.path / self.RESULTS).open("a", encoding="utf-8"), False)]

    @property
    def finished(self) -> set[tuple[int, int]]:
        return {record.key for record in self.records}

    def append(self, record: EpisodeRecord) -> None:
        """Write one finished episode down now (one ``write`` of a whole line per file, flushed)."""
        self.records.append(record)
        for file, transcript in self._files:
            file.write(json.dumps(record.to_json(transcript=transcript)) + "\n")  # ASCII: no torn UTF-8
            file.flush()

    def finish(self, summary_: dict[str, Any], table: str, group_members: int) -> None:
        """Close the appends; the files rewritten in order with advantages, the summary and table written."""
        for file, _ in self._files:
            file.close()
        add_advantages(self.records, group_members)
        self.records.sort(key=lambda r: (r.group, r.index, r.agent or ""))
        self._rewrite(self.records)
        _replace(self.path / self.SUMMARY, json.dumps(summary_, indent=2) + "\n")
        _replace(self.path / self.TABLE, table + "\n")

    def _rewrite(self, records: list[EpisodeRecord]) -> None:
        for name, transcript in ((self.TRANSCRIPTS, True), (self.RESULTS, False)):
            _replace(self.path / name, "".join(json.dumps(r.to_json(transcript=transcript)) + "\n" for r in records))

    @staticmethod
    def _read(path: Path) -> list[EpisodeRecord]:
        if not path.exists():
            return []
        records = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(EpisodeRecord.from_json(json.loads(line)))
            except (ValueError, TypeError):  # a line torn by a killed process: that episode is played again
                continue
        return records


def _replace(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a reader (or a kill) sees the old file or the new one."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def write_transcripts(records: list[EpisodeRecord], path: str | Path) -> Path:
    """One JSON line per episode: the OpenAI messages and tools plus reward, seed, scenario, advantage..."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _replace(path, "".join(json.dumps(record.to_json()) + "\n" for record in records))
    return path
