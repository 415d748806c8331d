"""``arena-agent``: play a model (any OpenAI-compatible endpoint) or a scripted baseline over seeded episodes.

    arena-agent arena_envs/TreasureHunt-v0 --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-8B \\
        --episodes 64 --concurrency 32 --out runs/agent
    arena-agent arena_envs/TreasureHunt-v0 --agent scripted --format hermes --episodes 16
    arena-agent arena_envs/Foraging-v0 --base-url ... --model ... --group-size 8 --wait-ticks 50
    arena-agent arena_envs/TeamCapture-v0 --base-url ... --model ... --chat-agents blue_agent_1,blue_agent_2
    arena-agent arena_envs/TeamCapture-v0 --agent scripted --others pretrained   # the rest: the shipped policy

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
import os
import signal
import sys
from typing import Any

from arena_envs.cli import UsageError, arena_agent, checked_env_arguments, env_argument
from arena_envs.llm.parsers import FORMATS
from arena_envs.names import resolve


async def served_agent(base_url: str, model: str, *args: Any, **kwargs: Any):
    """An :class:`~arena_envs.llm.agents.OpenAIChatAgent` of ``model`` at ``base_url``, or one line
    (:class:`UsageError`) when the server lists its models and ``model`` is not among them."""
    from arena_envs.llm.agents import OpenAIChatAgent

    agent = OpenAIChatAgent(base_url, model, *args, **kwargs)
    served = await agent.served_models()
    if served and model not in served:
        await agent.close()
        raise UsageError(f"the server at {base_url} does not serve {model!r}; it serves: {', '.join(served)}")
    return agent


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
    parser.add_argument("--format", choices=FORMATS, default="openai",
                        help="the call syntax: the one the prompt teaches (and --strict-parse accepts), and how "
                             "the scripted agent writes calls")
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
    parser.add_argument("--no-tools", action="store_true",
                        help="do not send tools= (servers that refuse it); the tools are listed in the prompt")
    parser.add_argument("--tools-in-prompt", action="store_true",
                        help="list the tools in the system prompt too (servers whose chat template drops tools=)")
    parser.add_argument("--tool-choice", default=None, metavar="auto|none|required|NAME",
                        help="tool_choice sent with the tools (a tool's name, or OpenAI's object "
                             "'{\"type\": \"function\", \"function\": {\"name\": NAME}}', forces that tool)")
    parser.add_argument("--extra-body", default=None, metavar="JSON",
                        help='extra request fields, e.g. \'{"chat_template_kwargs": {"enable_thinking": false}}\'')
    parser.add_argument("--strict-parse", action="store_true",
                        help="read only the --format syntax, a reply that is the call itself (no call in prose)")
    parser.add_argument("--text-calls", choices=("tool_calls", "user"), default="tool_calls",
                        help="calls read from text: declared as tool_calls beside the raw text, or answered in a "
                             "user message (the assistant message kept exactly as the model wrote it)")
    parser.add_argument("--null-content", action="store_true",
                        help="send content null (not '') beside tool_calls, for servers that want it")
    parser.add_argument("--no-call-penalty", type=float, default=0.0, metavar="X",
                        help="reward cost of a reply without a readable call, on top of the env's own")
    parser.add_argument("--env-arg", type=env_argument, action="append", default=[], metavar="KEY=VALUE",
                        help="environment argument, e.g. difficulty=medium (JSON values allowed)")
    parser.add_argument("--chat-agents", default="blue_agent_1",
                        help="Team Capture: the agents played through chat, comma-separated")
    parser.add_argument("--others", default="scripted", metavar="scripted|idle|pretrained",
                        help="Team Capture: what the agents not in --chat-agents do: the scripted team, stand "
                             "still, or a shipped policy (pretrained, pretrained:team_capture, an exported .npz)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--record", metavar="DIR", help="also write every episode to DIR/episodes.jsonl for "
                        "arena-view (Team Capture: one episode per chat agent)")
    return parser


TOOL_CHOICE_WORDS = ("auto", "none", "required")


def tool_choice(value: str | None, tools: list[dict[str, Any]]) -> Any:
    """``--tool-choice`` as sent: ``auto``/``none``/``required`` as they are; the name of one of
    ``tools``, or OpenAI's object form ``{"type": "function", "function": {"name": NAME}}``,
    forces that tool. Anything else is refused before the run, with the tools' names (a
    server answers an unknown name with HTTP 500 on every retry)."""
    if value is None or value in TOOL_CHOICE_WORDS:
        return value
    names = [tool["function"]["name"] for tool in tools]
    name = value
    if value.lstrip().startswith("{"):
        try:
            chosen = json.loads(value)
        except ValueError as error:
            raise UsageError(f"--tool-choice is not valid JSON: {error}") from None
        function = chosen.get("function") if isinstance(chosen, dict) else None
        if not (isinstance(function, dict) and chosen.keys() == {"type", "function"} and chosen["type"] == "function"
                and function.keys() == {"name"} and isinstance(function["name"], str)):
            raise UsageError('--tool-choice as JSON must be {"type": "function", "function": {"name": NAME}}, '
                             f"got {value}")
        name = function["name"]
    if name not in names:
        raise UsageError(f"--tool-choice {name!r} is not one of this scenario's tools: {', '.join(names)} "
                         f"(or {', '.join(TOOL_CHOICE_WORDS)})")
    return {"type": "function", "function": {"name": name}}


def json_object(option: str, text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as error:
        raise UsageError(f"{option} must be a JSON object: {error}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{option} must be a JSON object, got {type(value).__name__}")
    return value


#: Arguments that do not change what an episode plays: ``--resume`` accepts them changed.
RUN_ONLY_ARGUMENTS = ("out", "resume", "overwrite", "quiet", "concurrency", "timeout", "max_retries", "base_url",
                      "api_key", "episodes")
EXIT_ALL_FAILED = 1
EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal's number, as shells report it


def main(argv: list[str] | None = None) -> int:
    """The ``arena-agent`` console script: a user's mistake is one line and exit status 2."""
    return arena_agent(argv)


def play(argv: list[str] | None = None) -> int:
    """``arena-agent`` with these arguments, raising what :func:`main` reports in one line; SIGINT
    and SIGTERM stop the run, keeping what finished."""
    try:
        return asyncio.run(run(argv, handle_signals=True))
    except KeyboardInterrupt:  # Ctrl-C while starting, before the run's own handler is in place
        _say("interrupted before the first episode started")
        return EXIT_SIGNAL[signal.SIGINT]


async def run(argv: list[str] | None = None, *, handle_signals: bool = False) -> int:
    """``arena-agent`` from inside a running event loop (a notebook): ``await run([...])``."""
    args = build_parser().parse_args(argv)
    args.scenario = resolve(args.env_id)
    if args.episodes < 1 or args.group_size < 1 or args.concurrency < 1:
        raise UsageError("--episodes, --group-size and --concurrency must be at least 1")
    if args.episodes % args.group_size:
        raise UsageError(f"--episodes ({args.episodes}) must be a multiple of --group-size ({args.group_size})")
    if args.agent == "openai" and not args.model:
        raise UsageError("--model is required with --agent openai (or use --agent scripted)")
    if args.resume and args.overwrite:
        raise UsageError("--resume and --overwrite exclude each other")
    return await _main(args, handle_signals)


def _say(line: str) -> None:
    print(f"arena-agent: {line}", file=sys.stderr, flush=True)


async def _main(args: argparse.Namespace, handle_signals: bool) -> int:
    import arena_envs  # noqa: F401  (registers the environments)
    from arena_envs.llm.agents import ScriptedChatAgent
    from arena_envs.llm.backends import universal_schemas
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
    from arena_envs.treasure_hunt import TREASURE_HUNT_TOOL_SCHEMAS

    options = {"max_calls": args.max_calls, "on_no_call": args.on_no_call, "wait_ticks": args.wait_ticks,
               "max_turns": args.max_turns, "call_format": args.format, "strict_parse": args.strict_parse,
               "text_calls": args.text_calls, "null_content": args.null_content,
               "tools_in_prompt": args.tools_in_prompt or args.no_tools, "no_call_penalty": args.no_call_penalty,
               **dict(args.env_arg)}
    pool, team, scenario = None, None, args.scenario.title
    checked_env_arguments(args.scenario.key, dict(args.env_arg))  # now, not once per episode
    if args.scenario.multi_agent:
        team = {"chat_agents": [a.strip() for a in args.chat_agents.split(",") if a.strip()],
                "others": args.others, **options}
        try:  # a bad agent name or argument: say so now, not once per episode
            from arena_envs.llm.runner import other_teams
            from arena_envs.llm.team import TeamChat

            probe = TeamChat(team["chat_agents"], other_teams(args.others, args.seed, options), **options)
            tools = universal_schemas(probe.world.params)  # every chat agent's
            probe.close()
        except (ValueError, TypeError) as error:
            raise UsageError(f"cannot make {args.scenario.short_id}: {error}") from None
        if args.record:  # each chat agent's episode, beside the world (arena_envs.llm.team.TeamChat)
            from arena_envs.wrappers.record import EPISODES_FILE, EpisodeFile

            team["recording"] = EpisodeFile(os.path.join(args.record, EPISODES_FILE))
    else:
        try:
            pool = ChatPool(args.scenario.env_id, size=args.concurrency, record=args.record, **options)
        except (ValueError, TypeError) as error:  # a bad chat option: say so, no traceback
            raise UsageError(f"cannot make {args.scenario.short_id}: {error}") from None
        tools = (TREASURE_HUNT_TOOL_SCHEMAS if pool.tool_pool is None  # Treasure Hunt
                 else universal_schemas(pool.tool_pool.scenario.params))
    choice = tool_choice(args.tool_choice, tools)  # before the run: an unknown tool is refused now
    per_job = len(team["chat_agents"]) if team else 1
    if args.agent == "scripted":
        agent: Any = ScriptedChatAgent(args.format)
    else:
        sampling = {k: v for k, v in (("temperature", args.temperature), ("max_tokens", args.max_tokens),
                                      ("tool_choice", choice),
                                      ("extra_body", json_object("--extra-body", args.extra_body))) if v is not None}
        agent = await served_agent(args.base_url, args.model, args.api_key, timeout=args.timeout,
                                   max_retries=args.max_retries, max_in_flight=args.concurrency * per_job,
                                   send_tools=not args.no_tools, **sampling)
    config = {key: value for key, value in sorted(vars(args).items()) if key not in RUN_ONLY_ARGUMENTS}
    config["env_id"] = args.scenario.env_id  # any spelling of the same scenario resumes the run
    config["env_arg"] = dict(args.env_arg)  # as run.json gives it back (JSON has no tuples)
    del config["scenario"]
    try:
        out = RunDirectory(args.out, config, resume=args.resume, overwrite=args.overwrite)
    except (ValueError, OSError) as error:
        await agent.close()
        raise UsageError(str(error)) from None
    seeds = range(args.seed, args.seed + args.episodes // args.group_size)
    skip = out.finished
    to_play = sum((seed, index) not in skip for seed in seeds for index in range(args.group_size))
    if args.resume:
        _say(f"resuming {out.path}: {len(out.records)} episode records kept, {to_play} episodes to play")
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
    results = {"env_id": args.scenario.env_id, "agent": args.agent, "model": args.model, "format": args.format,
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
