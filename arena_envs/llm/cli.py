"""``arena-agent``: play a model (any OpenAI-compatible endpoint) or a scripted baseline over seeded episodes.

    arena-agent arena_envs/TreasureHunt-v0 --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-8B \\
        --episodes 64 --concurrency 32 --out runs/agent
    arena-agent arena_envs/TreasureHunt-v0 --agent scripted --format hermes --episodes 16
    arena-agent arena_envs/Foraging-v0 --base-url ... --model ... --group-size 8 --wait-ticks 50
    arena-agent arena_envs/TeamCapture-v0 --base-url ... --model ... --chat-agents blue_agent_1,blue_agent_2

Appends each episode to ``<out>/transcripts.jsonl`` (OpenAI messages and tools, reward, seed,
scenario, parse telemetry, usage, timing, error and its class) and ``<out>/results.jsonl`` (the
same without messages) the moment it ends; at the end (or on Ctrl-C / SIGTERM) writes
``<out>/results.json`` and ``<out>/results.txt`` from what finished and prints the table.
``--resume`` plays only the episodes not finished yet. Exit status: 0, 1 when every episode
failed, 2 for bad arguments, 130 after SIGINT, 143 after SIGTERM.
See docs/guide/llm-runner.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any

from arena_envs.llm.parsers import FORMATS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="arena-agent", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env_id", help="arena_envs/TreasureHunt-v0, Foraging-v0, Crafting-v0 or TeamCapture-v0")
    parser.add_argument("--agent", choices=("openai", "scripted"), default="openai",
                        help="a model behind --base-url, or the scripted baseline through the same chat path")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="the OpenAI-compatible endpoint")
    parser.add_argument("--model", default=None, help="model name (required with --agent openai)")
    parser.add_argument("--api-key", default=None, help="API key (default: $OPENAI_API_KEY; local servers need none)")
    parser.add_argument("--format", choices=FORMATS, default="openai", help="how the scripted agent writes calls")
    parser.add_argument("--episodes", type=int, default=16, help="episodes in all (seeds x group size)")
    parser.add_argument("--group-size", type=int, default=1, help="episodes per seed (GRPO groups; pass@k)")
    parser.add_argument("--seed", type=int, default=0, help="first seed; groups use seed, seed+1, ...")
    parser.add_argument("--concurrency", type=int, default=32, help="episodes in flight at once")
    parser.add_argument("--out", default="runs/agent",
                        help="directory for transcripts.jsonl, results.jsonl, results.json and results.txt")
    parser.add_argument("--resume", action="store_true",
                        help="complete the run in --out: play only the (seed, index) pairs not finished there")
    parser.add_argument("--overwrite", action="store_true", help="replace a run already in --out")
    parser.add_argument("--max-calls", type=int, default=8, help="tool calls run per reply")
    parser.add_argument("--max-turns", type=int, default=None, help="replies per episode before truncation")
    parser.add_argument("--wait-ticks", type=int, default=0,
                        help="2D scenarios: after a reply, keep ticking up to this many while the agent walks")
    parser.add_argument("--on-no-call", choices=("continue", "end"), default="continue",
                        help="a reply without a tool call: one tick carrying on, or the end of the episode")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds per model request, counted from when it is sent (not retried)")
    parser.add_argument("--max-retries", type=int, default=4,
                        help="retries of connection errors, 429 and 5xx other than rejected requests, with backoff")
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--no-tools", action="store_true", help="do not send tools= (servers that refuse it)")
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="environment argument, e.g. difficulty=medium (JSON values allowed)")
    parser.add_argument("--chat-agents", default="blue_agent_1",
                        help="Team Capture: the agents played through chat, comma-separated")
    parser.add_argument("--others", choices=("scripted", "idle"), default="scripted",
                        help="Team Capture: what the agents not in --chat-agents do")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


class UsageError(SystemExit):
    """Arguments ``arena-agent`` cannot run with: exit status 2 (as argparse's own), the message its text."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def env_kwargs(pairs: list[str]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"arena-agent: --env-arg needs KEY=VALUE, got {pair!r}")
        try:
            kwargs[key] = json.loads(value)
        except ValueError:
            kwargs[key] = value
    return kwargs


#: Arguments that do not change what an episode plays: ``--resume`` accepts them changed.
RUN_ONLY_ARGUMENTS = ("out", "resume", "overwrite", "quiet", "concurrency", "timeout", "max_retries", "base_url",
                      "api_key", "episodes")
EXIT_ALL_FAILED = 1
EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal's number, as shells report it


def main(argv: list[str] | None = None) -> int:
    """The ``arena-agent`` console script: SIGINT and SIGTERM stop the run, keeping what finished."""
    try:
        return asyncio.run(run(argv, handle_signals=True))
    except UsageError as error:
        print(error, file=sys.stderr)
        raise
    except KeyboardInterrupt:  # Ctrl-C while starting, before the run's own handler is in place
        _say("interrupted before the first episode started")
        return EXIT_SIGNAL[signal.SIGINT]


async def run(argv: list[str] | None = None, *, handle_signals: bool = False) -> int:
    """``arena-agent`` from inside a running event loop (a notebook): ``await run([...])``."""
    args = build_parser().parse_args(argv)
    if args.episodes < 1 or args.group_size < 1 or args.concurrency < 1:
        raise UsageError("arena-agent: --episodes, --group-size and --concurrency must be at least 1")
    if args.episodes % args.group_size:
        raise UsageError(f"arena-agent: --episodes ({args.episodes}) must be a multiple of --group-size "
                         f"({args.group_size})")
    if args.agent == "openai" and not args.model:
        raise UsageError("arena-agent: --model is required with --agent openai (or use --agent scripted)")
    if args.resume and args.overwrite:
        raise UsageError("arena-agent: --resume and --overwrite exclude each other")
    return await _main(args, handle_signals)


def _say(line: str) -> None:
    print(f"arena-agent: {line}", file=sys.stderr, flush=True)


async def _main(args: argparse.Namespace, handle_signals: bool) -> int:
    import arena_envs  # noqa: F401  (registers the environments)
    from arena_envs.llm.agents import OpenAIChatAgent, ScriptedChatAgent
    from arena_envs.llm.chat import ChatPool
    from arena_envs.llm.runner import (
        RunDirectory,
        one_at_a_time_warning,
        results_table,
        run_episodes,
        server_parallelism,
        summary,
        zero_spread_warning,
    )

    options = {"max_calls": args.max_calls, "on_no_call": args.on_no_call, "wait_ticks": args.wait_ticks,
               "max_turns": args.max_turns, **env_kwargs(args.env_arg)}
    pool, team, scenario = None, None, "TeamCapture"
    if args.env_id in ("arena_envs/TeamCapture-v0", "team_capture_v0"):
        team = {"chat_agents": [a.strip() for a in args.chat_agents.split(",") if a.strip()],
                "others": args.others, **options}
        try:  # a bad agent name or argument: say so now, not once per episode
            from arena_envs.llm.team import TeamChat

            TeamChat(team["chat_agents"], **options).close()
        except Exception as error:
            raise UsageError(f"arena-agent: cannot make {args.env_id!r}: {error}") from None
    else:
        try:
            pool = ChatPool(args.env_id, size=args.concurrency, **options)
        except Exception as error:  # an unknown env id or a bad argument: say so, no traceback
            raise UsageError(f"arena-agent: cannot make {args.env_id!r}: {error}") from None
        scenario = pool.scenario
    config = {key: value for key, value in sorted(vars(args).items()) if key not in RUN_ONLY_ARGUMENTS}
    try:
        out = RunDirectory(args.out, config, resume=args.resume, overwrite=args.overwrite)
    except (ValueError, OSError) as error:
        raise UsageError(f"arena-agent: {error}") from None
    per_job = len(team["chat_agents"]) if team else 1
    seeds = range(args.seed, args.seed + args.episodes // args.group_size)
    skip = out.finished
    to_play = sum((seed, index) not in skip for seed in seeds for index in range(args.group_size))
    if args.resume:
        _say(f"resuming {out.path}: {len(out.records)} episode records kept, {to_play} episodes to play")
    if args.agent == "scripted":
        agent: Any = ScriptedChatAgent(args.format)
    else:
        sampling = {k: v for k, v in (("temperature", args.temperature), ("max_tokens", args.max_tokens))
                    if v is not None}
        agent = OpenAIChatAgent(args.base_url, args.model, args.api_key, timeout=args.timeout,
                                max_retries=args.max_retries, max_in_flight=args.concurrency * per_job,
                                send_tools=not args.no_tools, **sampling)
    documented = await agent.server_slots() if args.agent == "openai" and args.concurrency > 1 else None
    warning = one_at_a_time_warning(args.concurrency, None, documented)
    if warning:
        _say(warning)
    bar = None
    if not args.quiet:
        from tqdm import tqdm

        bar = tqdm(total=to_play * per_job, desc=f"{scenario} episodes", unit="ep",
                   file=sys.stderr)

    def progress(record) -> None:
        out.append(record)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(success=record.success, refresh=False)

    task = asyncio.ensure_future(run_episodes(pool, agent, seeds, group_size=args.group_size,
                                              concurrency=args.concurrency, progress=progress, team=team,
                                              skip=skip))
    stopped: list[signal.Signals] = []
    if handle_signals:
        loop = asyncio.get_running_loop()

        def stop(signum: signal.Signals) -> None:
            stopped.append(signum)
            task.cancel()  # the episodes in flight are abandoned; a second signal kills at once
            for sig in EXIT_SIGNAL:
                loop.remove_signal_handler(sig)

        for sig in EXIT_SIGNAL:
            loop.add_signal_handler(sig, stop, sig)
    try:
        await task
    except asyncio.CancelledError:
        if not stopped:
            raise
    finally:
        if handle_signals and not stopped:
            for sig in EXIT_SIGNAL:
                asyncio.get_running_loop().remove_signal_handler(sig)
        if bar is not None:
            bar.close()
        await agent.close()
    records = out.records
    results = {"env_id": args.env_id, "agent": args.agent, "model": args.model, "format": args.format,
               "group_size": args.group_size, "complete": not stopped, **summary(records, args.group_size)}
    table = results_table(records, args.group_size)
    out.finish(results, table, args.group_size * per_job)
    print(table)
    print(f"transcripts: {out.path / out.TRANSCRIPTS}")
    for line in (zero_spread_warning(results),
                 None if warning else one_at_a_time_warning(args.concurrency, server_parallelism(
                     getattr(agent, "request_log", [])), None)):
        if line:
            _say(line)
    if stopped:
        name = stopped[0].name
        _say(f"stopped by {name}: {len(records)} finished episode records kept in {out.path}; "
             "run the same command with --resume to finish")
        return EXIT_SIGNAL[stopped[0]]
    failed = [r for r in records if r.error is not None]
    if records and len(failed) == len(records):
        _say(f"every episode failed ({len(failed)} of {len(records)}); the last error "
             f"({failed[-1].error_class}): {failed[-1].error}")
        return EXIT_ALL_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
