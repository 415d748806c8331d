"""Run an agent over seeded chat episodes, concurrently, and keep what happened.

    records = await run_episodes(ChatPool("arena_envs/TreasureHunt-v0", size=32), agent,
                                 seeds=range(64), group_size=4, concurrency=32)
    print(results_table(records))
    write_transcripts(records, "runs/agent/transcripts.jsonl")

Each :class:`EpisodeRecord` holds the OpenAI messages, the return, success and score, the
per-turn parse telemetry, token usage and the error that stopped it (a failing model
stops its own episode only). With ``group_size`` G every seed is played G times (GRPO
groups) and each episode gets its group-relative advantage: its return minus the group's
mean, over the group's standard deviation (0 when all are equal).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from arena_envs.llm.chat import ChatPool


@dataclass
class EpisodeRecord:
    """One played episode (a line of ``transcripts.jsonl``)."""

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
    advantage: float = 0.0

    @property
    def parse_failures(self) -> int:
        return self.formats.get("none", 0)


async def run_episode(pool: ChatPool, agent: Any, seed: int, group: int = 0, index: int = 0) -> EpisodeRecord:
    """Play one episode of ``pool``'s scenario with ``agent``; never raises for what the model does."""
    session = pool.session()
    record = EpisodeRecord(pool.scenario, seed, group, index)
    usage: Counter[str] = Counter()
    formats: Counter[str] = Counter()
    invalid: Counter[str] = Counter()
    try:
        messages, tools = await session.reset(seed)
        record.tools = tools
        while not session.done:
            reply = await agent.reply(session.messages, tools, episode=f"{seed}/{index}")
            usage.update(reply.usage)
            record.retries += reply.retries
            if reply.message is None:
                record.error = reply.error or "the agent gave no reply"
                break
            step = await session.step(reply.message)
            formats[step.info["format"]] += 1
            status = step.info["parse_status"]
            record.parse_statuses[status] = record.parse_statuses.get(status, 0) + 1
            record.unreadable_calls += step.info["calls_unreadable"]
            invalid.update(entry["code"] for entry in step.info["invalid"])
    except Exception as error:  # an episode's failure is recorded, never shared with the others
        record.error = f"{type(error).__name__}: {error}"[:500]
    finally:
        record.messages = list(session.messages)
        record.reward = session.episode_return
        info = session.last_info
        record.success = bool(info.get("success", False))
        record.score = float(info.get("score", 0.0) or 0.0)
        record.turns, record.steps = session.turn, session.ticks
        record.formats, record.invalid_calls, record.usage = dict(formats), dict(invalid), dict(usage)
        await session.close()
    return record


async def run_team_episode(agent: Any, seed: int, group: int = 0, index: int = 0, *,
                           chat_agents: Iterable[str] = ("blue_agent_1",), others: str = "scripted",
                           **options: Any) -> list[EpisodeRecord]:
    """One Team Capture match with ``chat_agents`` played by ``agent`` (their replies asked together)
    and the other agents ``"scripted"`` (the scripted team) or ``"idle"``; one record per chat agent.
    ``options``: chat options and ``team_capture_v0.parallel_env`` arguments."""
    from arena_envs.llm.team import TeamChat, scripted_team

    controllers = [scripted_team("blue"), scripted_team("red")] if others == "scripted" else []
    match = TeamChat(list(chat_agents), controllers, **options)
    names = list(match.sessions)
    records = {name: EpisodeRecord("TeamCapture", seed, group, index, agent=name) for name in names}
    counters = {name: (Counter(), Counter(), Counter()) for name in names}  # usage, formats, invalid
    try:
        openings = await match.areset(seed)
        for name, (_messages, tools) in openings.items():
            records[name].tools = tools
        while not match.done:
            live = [name for name in names if not match.sessions[name].done]
            replies = await asyncio.gather(*(agent.reply(match.sessions[n].messages, match.sessions[n].tools,
                                                         episode=f"{seed}/{index}/{n}") for n in live))
            failed = [(n, r) for n, r in zip(live, replies, strict=True) if r.message is None]
            for name, reply in zip(live, replies, strict=True):
                counters[name][0].update(reply.usage)
                records[name].retries += reply.retries
            if failed:
                for name, reply in failed:
                    records[name].error = reply.error or "the agent gave no reply"
                break
            steps = await match.astep({n: r.message for n, r in zip(live, replies, strict=True)})
            for name, step in steps.items():
                counters[name][1][step.info["format"]] += 1
                statuses = records[name].parse_statuses
                statuses[step.info["parse_status"]] = statuses.get(step.info["parse_status"], 0) + 1
                counters[name][2].update(entry["code"] for entry in step.info["invalid"])
                records[name].unreadable_calls += step.info["calls_unreadable"]
    except Exception as error:  # the match's failure is its own
        for record in records.values():
            record.error = record.error or f"{type(error).__name__}: {error}"[:500]
    finally:
        match.close()
    for name, record in records.items():
        session = match.sessions[name]
        record.messages, record.reward = list(session.messages), session.episode_return
        record.success = bool(session.last_info.get("success", False))
        record.score = float(session.last_info.get("score", 0.0) or 0.0)
        record.turns, record.steps = session.turn, session.ticks
        usage, formats, invalid = counters[name]
        record.usage, record.formats, record.invalid_calls = dict(usage), dict(formats), dict(invalid)
    return list(records.values())


async def run_episodes(pool: ChatPool | None, agent: Any, seeds: Iterable[int], *, group_size: int = 1,
                       concurrency: int = 32, progress: Callable[[EpisodeRecord], None] | None = None,
                       team: dict[str, Any] | None = None) -> list[EpisodeRecord]:
    """Every seed played ``group_size`` times, at most ``concurrency`` episodes at once; records in
    (seed, index) order, with group-relative advantages.

    ``pool`` gives the sessions of a single-agent scenario; for Team Capture pass ``pool=None``
    and ``team`` (the keywords of :func:`run_team_episode`): each match gives one record per chat agent.
    """
    if group_size < 1 or concurrency < 1:
        raise ValueError("group_size and concurrency must be at least 1")
    if (pool is None) == (team is None):
        raise ValueError("give either a ChatPool or the team options")
    jobs = [(seed, group, index) for group, seed in enumerate(seeds) for index in range(group_size)]
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


def add_advantages(records: list[EpisodeRecord]) -> None:
    """Group-relative advantages, as GRPO uses them: (return - group mean) / group std (0 if flat)."""
    groups: dict[int, list[EpisodeRecord]] = {}
    for record in records:
        groups.setdefault(record.group, []).append(record)
    for members in groups.values():
        rewards = [m.reward for m in members]
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        for member in members:
            member.advantage = (member.reward - mean) / std if std > 1e-8 else 0.0


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
    for record in records:
        formats.update(record.formats)
        statuses.update(record.parse_statuses)
        invalid.update(record.invalid_calls)
        usage.update(record.usage)
    out: dict[str, Any] = {
        "episodes": n,
        "success": sum(r.success for r in records) / n,
        "score": sum(r.score for r in records) / n,
        "return": sum(r.reward for r in records) / n,
        "steps": sum(r.steps for r in records) / n,
        "turns": sum(r.turns for r in records) / n,
        "errors": sum(r.error is not None for r in records),
        "parse_failures": formats.get("none", 0),
        "turns_by_format": dict(formats),
        "turns_by_parse_status": dict(statuses),
        "unreadable_calls": sum(r.unreadable_calls for r in records),
        "invalid_calls": dict(invalid),
        "tokens": dict(usage),
        "retries": sum(r.retries for r in records),
    }
    if group_size > 1:
        groups: dict[int, list[bool]] = {}
        for record in records:
            groups.setdefault(record.group, []).append(record.success)
        for k in sorted({1, group_size}):
            out[f"pass@{k}"] = sum(pass_at_k(len(g), sum(g), k) for g in groups.values()) / len(groups)
    return out


def results_table(records: list[EpisodeRecord], group_size: int = 1) -> str:
    """The results as an aligned text table."""
    s = summary(records, group_size)
    if not s["episodes"]:
        return "no episodes"
    rows = [("episodes", str(s["episodes"])), ("success", f"{s['success']:.1%}"), ("score", f"{s['score']:.2f}"),
            ("return", f"{s['return']:.3f}"), ("steps", f"{s['steps']:.1f}"), ("turns", f"{s['turns']:.1f}")]
    rows += [(key, f"{s[key]:.1%}") for key in s if key.startswith("pass@")]
    rows += [("turns by format", _counts(s["turns_by_format"])),
             ("parse failures", str(s["parse_failures"])),
             ("turns by parse status", _counts(s["turns_by_parse_status"])),
             ("unreadable calls", str(s["unreadable_calls"])),
             ("invalid calls", _counts(s["invalid_calls"]) or "0"),
             ("tokens", _counts(s["tokens"]) or "not reported"),
             ("retries", str(s["retries"])),
             ("errors", str(s["errors"]))]
    errors = Counter(r.error.split(":")[0] for r in records if r.error)
    if errors:
        rows.append(("errors by kind", _counts(dict(errors))))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{key} {value}" for key, value in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def write_transcripts(records: list[EpisodeRecord], path: str | Path) -> Path:
    """One JSON line per episode: the OpenAI messages and tools plus reward, seed, scenario, advantage..."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            line = asdict(record)
            line["parse_failures"] = record.parse_failures
            out.write(json.dumps(line) + "\n")  # ASCII escapes: lone surrogates cannot break the file
    return path
