"""Evaluate a language model on held-out seeds of a chat environment, with 95% intervals.

    python -m arena_envs.training.llm_eval runs/grpo --episodes 64 --seed 100000
    python -m arena_envs.training.llm_eval DIR --gguf-file F.gguf --env TreasureHunt-v0 --env-arg difficulty=easy

The episodes are played by the same rollout GRPO trains with (:class:`~arena_envs.training.llm_grpo.ChatRollout`),
so a model is judged exactly as it acts in training. A run directory brings its environment settings
(``--env``, ``--env-arg``, ``--max-turns`` override them). Prints success, mean return, readable-call rate
and turns, each with its 95% interval, and writes them as JSON with ``--json``, each episode's outcome included.

Sampling is seeded by ``--seed``, so the same model on the same seeds plays the same episodes. Two models
are compared seed by seed with ``--baseline EVAL.json`` (another evaluation on the same seeds): the
difference in success and in return, each with the 95% interval of the mean of the per-seed differences.
Pairing removes what the seeds share (a deep trail is hard for both), so that interval is narrower than
the two separate ones suggest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import yaml

from arena_envs.cli import env_argument
from arena_envs.training.llm_common import ModelLoadError, chat_env_id, load_model


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def mean_interval(values: list[float], z: float = 1.96) -> tuple[float, float, float]:
    """Mean and its normal-approximation 95% interval."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, mean - z * sd / math.sqrt(n), mean + z * sd / math.sqrt(n)


def outcome(episode: dict[str, Any]) -> dict[str, Any]:
    """What one episode of an evaluation kept: enough to compare two models seed by seed."""
    return {"seed": episode["seed"], "success": episode["success"], "return": episode["env_return"],
            "turns": episode["turns"], "readable": sum(episode["readable"]) / max(len(episode["readable"]), 1),
            "generated_tokens": sum(len(reply) for reply in episode["generated"]),
            # what the model sampled, in 16 hex digits: the same seed must sample it again, another seed not
            "generated_digest": hashlib.sha256(json.dumps([list(map(int, reply)) for reply in episode["generated"]])
                                               .encode()).hexdigest()[:16]}


def paired_difference(summary: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """``summary`` minus ``baseline`` in success and return: the mean per-seed difference and its interval."""
    ours = {e["seed"]: e for e in summary["per_episode"]}
    theirs = {e["seed"]: e for e in baseline.get("per_episode", [])}
    if sorted(ours) != sorted(theirs):
        raise ValueError("the baseline was not evaluated on the same seeds (or holds no per-episode outcomes): "
                         f"{summary['seeds']} here, {baseline.get('seeds')} there")
    return {"baseline": baseline["model"],
            **{key: list(mean_interval([float(ours[s][key]) - float(theirs[s][key]) for s in sorted(ours)]))
               for key in ("success", "return")}}


def summarise(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(episodes)
    wins = sum(e["success"] for e in episodes)
    replies = [r for e in episodes for r in e["readable"]]
    outcomes = [outcome(e) for e in episodes]
    return {"episodes": n,
            "success": [wins / n, *wilson(wins, n)],
            "return": list(mean_interval([o["return"] for o in outcomes])),
            "readable_call_rate": [sum(replies) / max(len(replies), 1),
                                   *mean_interval([o["readable"] for o in outcomes])[1:]],
            "turns": list(mean_interval([float(o["turns"]) for o in outcomes])),
            "per_episode": outcomes}


def table(summary: dict[str, Any]) -> str:
    lines = [f"{'episodes':<20} {summary['episodes']}"]
    for key in ("success", "return", "readable_call_rate", "turns"):
        value, low, high = summary[key]
        lines.append(f"{key:<20} {value:8.3f}  [{low:.3f}, {high:.3f}]")
    if "versus" in summary:
        lines.append(f"minus {summary['versus']['baseline']}, seed by seed:")
        for key in ("success", "return"):
            value, low, high = summary["versus"][key]
            lines.append(f"  {key:<18} {value:+8.3f}  [{low:+.3f}, {high:+.3f}]")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import torch

    from arena_envs.training.llm_grpo import ChatRollout

    parser = argparse.ArgumentParser(prog="python -m arena_envs.training.llm_eval",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="an arena-train run directory, a model directory or a hub id")
    parser.add_argument("--gguf-file")
    parser.add_argument("--env", help="chat environment (default: the run's)")
    parser.add_argument("--env-arg", type=env_argument, action="append", default=None, metavar="KEY=VALUE")
    parser.add_argument("--max-turns", type=int, default=None)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--seed", type=int, default=100_000, help="first held-out seed (training starts at 0)")
    parser.add_argument("--batch", type=int, default=16, help="episodes played together")
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--json", help="write the summary here")
    parser.add_argument("--baseline", type=Path, metavar="EVAL.json",
                        help="another model's evaluation on the same seeds: report the difference seed by seed")
    args = parser.parse_args(argv)
    baseline = None
    if args.baseline is not None:
        try:
            baseline = json.loads(args.baseline.read_text())
        except (OSError, ValueError) as error:
            parser.error(f"--baseline: cannot read {args.baseline}: {error}")
        if not isinstance(baseline, dict) or baseline.get("seeds") != [args.seed, args.seed + args.episodes] \
                or "per_episode" not in baseline:
            parser.error(f"--baseline: {args.baseline} holds no per-episode outcomes of seeds "
                         f"{args.seed} to {args.seed + args.episodes - 1}")

    run_config = Path(args.model) / "config.yaml"
    config: dict[str, Any] = yaml.safe_load(run_config.read_text()) if run_config.is_file() else {}
    if not (args.env or config.get("env_id")):
        parser.error("--env is required for a model that is not an arena-train run directory")
    config["env_id"] = chat_env_id(args.env or config["env_id"])
    if args.env_arg is not None:
        config["env_kwargs"] = dict(args.env_arg)
    config.setdefault("env_kwargs", {})
    for key, default in (("max_turns", None), ("max_new_tokens", 64), ("temperature", 1.0)):
        config[key] = getattr(args, key) if getattr(args, key) is not None else config.get(key, default)
    config.update(group_size=1, success_bonus=0.0, no_call_penalty=0.0,
                  max_completion_tokens=config.get("max_completion_tokens", 4096))
    try:
        model, tokenizer = load_model(args.model, args.gguf_file)
    except ModelLoadError as error:
        raise SystemExit(f"llm_eval: {error}") from None
    rollout = ChatRollout(config, tokenizer, Path("."))
    episodes: list[dict[str, Any]] = []
    torch.manual_seed(args.seed)  # the same model on the same seeds samples the same episodes
    try:
        for start in range(args.seed, args.seed + args.episodes, args.batch):
            seeds = list(range(start, min(start + args.batch, args.seed + args.episodes)))
            episodes += rollout.play(model, seeds)
    finally:
        rollout.close()
    summary = {"model": args.model, "env_id": config["env_id"], "seeds": [args.seed, args.seed + args.episodes],
               **summarise(episodes)}
    if baseline is not None:
        try:
            summary["versus"] = paired_difference(summary, baseline)
        except ValueError as error:
            raise SystemExit(f"llm_eval: --baseline {args.baseline}: {error}") from None
    print(table(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    main()
