"""``arena-agent``: play a model (any OpenAI-compatible endpoint) or a scripted baseline over seeded episodes.

    arena-agent arena_envs/TreasureHunt-v0 --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-8B \\
        --episodes 64 --concurrency 32 --out runs/agent
    arena-agent arena_envs/TreasureHunt-v0 --agent scripted --format hermes --episodes 16
    arena-agent arena_envs/Foraging-v0 --base-url ... --model ... --group-size 8 --wait-ticks 50
    arena-agent arena_envs/TeamCapture-v0 --base-url ... --model ... --chat-agents blue_agent_1,blue_agent_2

Writes ``<out>/transcripts.jsonl`` (one episode per line: OpenAI messages and tools, reward,
seed, scenario, group-relative advantage, parse telemetry, usage, error) and
``<out>/results.json``, and prints the results table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from arena_envs.cli import UsageError, arena_agent, checked_env_arguments, env_argument
from arena_envs.llm.parsers import FORMATS
from arena_envs.names import resolve


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="arena-agent", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env_id", help="TreasureHunt-v0, Foraging-v0, Crafting-v0 or TeamCapture-v0 (any spelling: "
                                       "arena_envs/Foraging-v0, foraging, team_capture_v0 ...)")
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
    parser.add_argument("--out", default="runs/agent", help="directory for transcripts.jsonl and results.json")
    parser.add_argument("--max-calls", type=int, default=8, help="tool calls run per reply")
    parser.add_argument("--max-turns", type=int, default=None, help="replies per episode before truncation")
    parser.add_argument("--wait-ticks", type=int, default=0,
                        help="2D scenarios: after a reply, keep ticking up to this many while the agent walks")
    parser.add_argument("--on-no-call", choices=("continue", "end"), default="continue",
                        help="a reply without a tool call: one tick carrying on, or the end of the episode")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per model request")
    parser.add_argument("--max-retries", type=int, default=4, help="retries on 429/5xx, with backoff")
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--no-tools", action="store_true", help="do not send tools= (servers that refuse it)")
    parser.add_argument("--env-arg", type=env_argument, action="append", default=[], metavar="KEY=VALUE",
                        help="environment argument, e.g. difficulty=medium (JSON values allowed)")
    parser.add_argument("--chat-agents", default="blue_agent_1",
                        help="Team Capture: the agents played through chat, comma-separated")
    parser.add_argument("--others", choices=("scripted", "idle"), default="scripted",
                        help="Team Capture: what the agents not in --chat-agents do")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The ``arena-agent`` console script: a user's mistake is one line and exit status 2."""
    return arena_agent(argv)


def play(argv: list[str] | None = None) -> int:
    """``arena-agent`` with these arguments, raising what :func:`main` reports in one line."""
    return asyncio.run(run(argv))


async def run(argv: list[str] | None = None) -> int:
    """``arena-agent`` from inside a running event loop (a notebook): ``await run([...])``."""
    args = build_parser().parse_args(argv)
    args.scenario = resolve(args.env_id)
    if args.episodes < 1 or args.group_size < 1 or args.concurrency < 1:
        raise UsageError("--episodes, --group-size and --concurrency must be at least 1")
    if args.episodes % args.group_size:
        raise UsageError(f"--episodes ({args.episodes}) must be a multiple of --group-size ({args.group_size})")
    if args.agent == "openai" and not args.model:
        raise UsageError("--model is required with --agent openai (or use --agent scripted)")
    return await _main(args)


async def _main(args: argparse.Namespace) -> int:
    import arena_envs  # noqa: F401  (registers the environments)
    from arena_envs.llm.agents import OpenAIChatAgent, ScriptedChatAgent
    from arena_envs.llm.chat import ChatPool
    from arena_envs.llm.runner import results_table, run_episodes, summary, write_transcripts

    options = {"max_calls": args.max_calls, "on_no_call": args.on_no_call, "wait_ticks": args.wait_ticks,
               "max_turns": args.max_turns, **dict(args.env_arg)}
    pool, team, scenario = None, None, args.scenario.title
    checked_env_arguments(args.scenario.key, dict(args.env_arg))  # now, not once per episode
    if args.scenario.multi_agent:
        team = {"chat_agents": [a.strip() for a in args.chat_agents.split(",") if a.strip()],
                "others": args.others, **options}
        try:  # a bad agent name or argument: say so now, not once per episode
            from arena_envs.llm.team import TeamChat

            TeamChat(team["chat_agents"], **options).close()
        except (ValueError, TypeError) as error:
            raise UsageError(f"cannot make {args.scenario.short_id}: {error}") from None
    else:
        try:
            pool = ChatPool(args.scenario.env_id, size=args.concurrency, **options)
        except (ValueError, TypeError) as error:  # a bad chat option: say so, no traceback
            raise UsageError(f"cannot make {args.scenario.short_id}: {error}") from None
    if args.agent == "scripted":
        agent: Any = ScriptedChatAgent(args.format)
    else:
        sampling = {k: v for k, v in (("temperature", args.temperature), ("max_tokens", args.max_tokens))
                    if v is not None}
        agent = OpenAIChatAgent(args.base_url, args.model, args.api_key, timeout=args.timeout,
                                max_retries=args.max_retries, send_tools=not args.no_tools, **sampling)
    bar = None
    if not args.quiet:
        from tqdm import tqdm

        per_episode = len(team["chat_agents"]) if team else 1
        bar = tqdm(total=args.episodes * per_episode, desc=f"{scenario} episodes", unit="ep", file=sys.stderr)

    def progress(record) -> None:
        if bar is not None:
            bar.update(1)
            bar.set_postfix(success=record.success, refresh=False)

    seeds = range(args.seed, args.seed + args.episodes // args.group_size)
    try:
        records = await run_episodes(pool, agent, seeds, group_size=args.group_size,
                                     concurrency=args.concurrency, progress=progress, team=team)
    finally:
        if bar is not None:
            bar.close()
        await agent.close()
    out = Path(args.out)
    path = write_transcripts(records, out / "transcripts.jsonl")
    results = {"env_id": args.scenario.env_id, "agent": args.agent, "model": args.model, "format": args.format,
               "group_size": args.group_size, **summary(records, args.group_size)}
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(results_table(records, args.group_size))
    print(f"transcripts: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
