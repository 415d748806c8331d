"""``arena-eval``: a trained model or a shipped policy against the random agent and the scripted baseline.

    arena-eval runs/foraging Foraging-v0 --episodes 200 --rollout
    arena-eval scripted Foraging-v0 --episodes 200           # the baselines alone
    arena-eval runs/team_capture team_capture_v0 --episodes 64
    arena-eval pretrained Crafting-v0 --episodes 200         # the shipped policy (no torch needed)
    arena-eval --ladder random scripted pretrained pretrained+scripted --games 200   # ratings of teams

Every agent plays the same K seeded worlds (one episode each, seeds ``--seed`` ...
``--seed + K - 1``, held out from training's by default). In team capture every agent
plays blue against each baseline team as red. The table (mean ± std of return, score,
success and episode length) is printed and written to ``--out`` (default: the model's
run directory, else ``runs/eval``) with:

    eval.md, eval.json          the table
    learning_curve.png          the run's curve over training, baselines as dashed lines
    rollout.gif, rollout.jsonl  with --rollout: one episode of the first row, tick by tick

``--record DIR`` writes every episode played (every row) to ``DIR/episodes.jsonl`` for
``arena-view DIR``: the states to redraw each tick, actions, results, rewards and info.

A model is rebuilt from its run's ``config.yaml`` and weights, and none of its file's pickled
objects is run; ``--trust-pickle`` lets Stable-Baselines3's ``PPO.load`` read a model those do
not rebuild, running any code the file holds (``training/weights.py``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from arena_envs import pretrained
from arena_envs.cli import UsageError, arena_eval, checked_env_arguments, env_argument
from arena_envs.names import resolve
from arena_envs.sharded import make_native_env as make_native
from arena_envs.training.common import (
    agent_factory,
    is_team,
    load_config,
    play,
    policy,
    run_config,
    run_directory,
    trainable,
)
from arena_envs.world import RESULT_CODES, TOOL_NAMES
from arena_envs.wrappers.flatten import merge_agents

BASELINES = ("random", "scripted")


def model_path(spec: str) -> Path:
    """A model's zip from a path to it or to its run directory."""
    path = Path(spec)
    if path.is_dir():
        path = path / "model.zip"
    if not path.exists():
        raise UsageError(f"{spec} is neither {' nor '.join(BASELINES)} nor a model (.zip or run directory)")
    return path


def format_table(rows: dict[str, dict[str, np.ndarray]], title: str) -> str:
    w = max(len("agent"), *(len(name) for name in rows))
    draws = all("draw" in r for r in rows.values())  # team games: a draw is neither a win nor a loss
    lines = [title, "", f"| {'agent':<{w}} | return           | score          | success       | length        |"
             + (" draw   |" if draws else ""),
             f"|{'-' * (w + 2)}|------------------|----------------|---------------|---------------|"
             + ("--------|" if draws else "")]
    for name, r in rows.items():
        lines.append(f"| {name:<{w}} | {r['return'].mean():7.2f} ± {r['return'].std():6.2f} "
                     f"| {r['score'].mean():6.1f} ± {r['score'].std():5.1f} "
                     f"| {100 * r['success'].mean():5.1f}% ± {100 * r['success'].std():3.0f} "
                     f"| {r['length'].mean():5.0f} ± {r['length'].std():4.0f} |"
                     + (f" {100 * r['draw'].mean():5.1f}% |" if draws else ""))
    return "\n".join(lines)


WINDOW = 100  # the training curve's points are means over the last this many episodes

# What the learning curve shows: (progress column, axis label, the baselines' summary column)
SINGLE_PANELS = (("rollout/score_mean", "episode score (last 100)", "score_mean"),
                 ("rollout/ep_rew_mean", "episode return (last 100)", "return_mean"))
TEAM_PANELS = (("eval/return_mean", "score difference vs scripted team", "return_mean"),
               ("eval/score_mean", "team score vs scripted team", "score_mean"))


def read_progress(run: Path, column: str) -> tuple[list[dict[str, str]], list[int]]:
    """The rows of a run's ``progress*.csv`` that log ``column``, by timesteps, and the steps the
    run was resumed at. A resumed segment (``progress-from-<steps>.csv``) starts at its checkpoint,
    so it replaces whatever an interrupted segment logged after that checkpoint."""
    segments = []
    for file in run.glob("progress*.csv"):
        resumed = re.fullmatch(r"progress-from-(\d+)\.csv", file.name)
        with file.open() as fh:
            segments.append((int(resumed.group(1)) if resumed else 0, [r for r in csv.DictReader(fh) if r.get(column)]))
    if not segments:  # a run without its logs (a model sent on its own, with its config)
        return [], []
    segments.sort(key=lambda segment: segment[0])
    starts = [start for start, _ in segments]
    rows = []
    for (_, segment), replaced_after in zip(segments, [*starts[1:], math.inf], strict=True):
        rows += [r for r in segment if float(r["time/total_timesteps"]) <= replaced_after]
    rows.sort(key=lambda r: float(r["time/total_timesteps"]))
    return rows, starts[1:]


def learning_curve(run: Path, panels, baselines: dict[str, dict[str, float]], path: Path,
                   env_id: str = "") -> Path | None:
    """The run's progress*.csv plotted, one panel per (column, label, baseline key) of ``panels``,
    with the baselines as dashed lines and the points where the run was resumed as dotted ones."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, resumed_at = read_progress(run, panels[0][0])
    if not rows:
        return None
    steps = np.array([float(r["time/total_timesteps"]) for r in rows])
    # a mean over the first few episodes to end (often deaths, scoring 0) says little: hollow
    # markers; before the first one ended there is no point at all, and a shaded span says so
    few = np.array([float(r.get("rollout/score_episodes") or WINDOW) < WINDOW for r in rows])
    first_update = min(float(r["time/total_timesteps"]) for r in read_progress(run, "time/total_timesteps")[0])
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4))
    for ax, (column, label, key) in zip(axes, panels, strict=True):
        values = np.array([float(r[column]) for r in rows])
        ax.plot(steps, values, label="PPO")
        if "rollout" in column and few.any():  # (an evaluation's points are each a whole evaluation)
            ax.plot(steps[few], values[few], "o", mfc="none", color="tab:blue",
                    label=f"fewer than {WINDOW} episodes ended")
        if "rollout" in column and first_update < steps[0]:
            ax.axvspan(0, steps[0], color="0.9", label="no episode finished yet")
        for (name, values), colour in zip(baselines.items(), ("tab:red", "tab:green"), strict=False):
            ax.axhline(values[key], ls="--", color=colour, label=f"{name} ({values[key]:.2f})")
        for i, start in enumerate(resumed_at):
            ax.axvline(start, ls=":", color="grey", label="resumed" if i == 0 else None)
        ax.set_xlabel("env steps" if "rollout" in column else "agent steps")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    minutes = sum(_segment_seconds(f) for f in run.glob("progress*.csv")) / 60
    axes[0].legend(loc="best")
    trained_on = f"PPO on {env_id.split('/')[-1]}" if env_id else f"{run.name}: PPO"
    fig.suptitle(f"{trained_on}: learning curve ({steps[-1]:,.0f} steps, {minutes:.1f} min of training)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _segment_seconds(file: Path) -> float:
    with file.open() as fh:
        times = [float(r["time/time_elapsed"]) for r in csv.DictReader(fh) if r.get("time/time_elapsed")]
    return max(times, default=0.0)


def record_rollout(make_agent, env_id: str, seed: int, out: Path, env_kwargs: dict[str, Any] | None = None,
                   make_opponent=None, every: int = 2, name: str = "rollout") -> tuple[Path, Path]:
    """One episode in world ``seed`` (in team capture, ``make_agent``'s blue against
    ``make_opponent``'s red): ``<out>/<name>.gif`` (every ``every``-th tick) and
    ``<out>/<name>.jsonl``, one JSON line per tick."""
    from arena_envs.render import save_gif

    envs = make_native(env_id, 1, **(env_kwargs or {}))
    native = envs.unwrapped
    act = policy(envs, env_id, make_agent, make_opponent)
    agents = len(getattr(native, "agents", None) or ()) or None
    obs, info = envs.reset(seed=seed)
    frames = [native.frame(0)]
    lines = []
    for tick in range(1, 100_000):
        action = act(obs)
        obs, reward, terminated, truncated, info = envs.step(action)
        rows, agent_obs = merge_agents(action, agents), merge_agents(obs, agents)  # one row per agent
        lines.append(json.dumps({
            "tick": tick,
            "agents": [{**_jsonable(rows, i), "result": RESULT_CODES[int(agent_obs["last_action"][i, 1])],
                        "x": round(float(agent_obs["agent"][i, 0]), 2), "z": round(float(agent_obs["agent"][i, 1]), 2)}
                       for i in range(len(rows["tool"]))],
            "reward": np.round(np.ravel(reward), 4).tolist(),
            "info": {k: round(float(v[0]), 3) for k, v in info.items() if not k.startswith("_")}}))
        done = np.ravel(terminated | truncated)[0]
        if tick % every == 0 or done:
            frames.append(native.frame(0))
        if done:
            break
    envs.close()
    (out / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    return save_gif(frames, out / f"{name}.gif", fps=20), out / f"{name}.jsonl"


def _jsonable(actions: dict[str, Any], i: int) -> dict[str, Any]:
    """Row ``i``'s tool and its parameters, from a batch of structured actions."""
    tool = TOOL_NAMES[int(actions["tool"][i])]
    params = actions.get(tool)  # the entry named after the tool (none for query_inventory and idle)
    if isinstance(params, dict):
        params = {k: np.asarray(v)[i].tolist() for k, v in params.items()}
    elif params is not None:
        params = np.asarray(params)[i].tolist()
    return {"tool": tool, "params": params}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="arena-eval", description=__doc__.split("\n\n")[0],
                                     epilog="arena-eval --ladder TEAM TEAM ...: a rated round-robin of Team Capture "
                                            "teams, pure or mixed (arena-eval --ladder --help)")
    parser.add_argument("model", metavar="MODEL_OR_BASELINE",
                        help="a model (.zip or run directory from arena-train), a shipped policy (pretrained, "
                             "pretrained:<scenario>, an exported .npz) or a baseline: random, scripted")
    parser.add_argument("env", help="scenario, any spelling: Foraging-v0, arena_envs/Foraging-v0, foraging, "
                                    "team_capture_v0 ...")
    parser.add_argument("--episodes", type=int, default=200, help="episodes per agent (default 200)")
    parser.add_argument("--seed", type=int, default=10_000, help="seed of the first world (default 10000)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--stochastic", action="store_true",
                      help="sample the policy's actions (default: a model's most likely, a pretrained policy's sample)")
    mode.add_argument("--deterministic", action="store_true", help="the policy's most likely actions")
    parser.add_argument("--out", help="where to write (default: the model's run directory, else runs/eval)")
    parser.add_argument("--rollout", action="store_true", help="also record one episode of the model")
    parser.add_argument("--env-arg", type=env_argument, action="append", default=[], metavar="KEY=VALUE",
                        help="scenario argument on top of the run's (or the scenario config's), e.g. layout=classic "
                             "or max_ticks=100 (JSON value or bare string); repeatable")
    parser.add_argument("--record", metavar="DIR", help="write every episode to DIR/episodes.jsonl for arena-view")
    parser.add_argument("--trust-pickle", action="store_true",
                        help="let Stable-Baselines3's PPO.load read a model its config and weights do not rebuild: "
                             "that unpickles the file, running any code it holds (only for files you trust)")
    return parser.parse_args(argv)


def evaluate(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Run ``arena-eval`` with these arguments; mean and std of every column, per agent (per
    matchup, ``"<blue> vs <red>"``, in team capture)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--ladder" in argv:  # a round-robin of teams (training/ladder.py)
        from arena_envs.training.ladder import ladder

        return ladder([arg for arg in argv if arg != "--ladder"])
    args = parse_args(argv)
    env_id = trainable(args.env).env_id
    is_model = args.model not in BASELINES and not pretrained.is_pretrained(args.model)
    if is_model:
        import torch

        torch.set_num_threads(1)  # small batches of a small MLP: more threads would only contend
        path = model_path(args.model)
        config = run_config(path)
        trained_on = resolve(config["env_id"])
        if trained_on.env_id != env_id:
            raise UsageError(f"{args.model} was trained on {trained_on.short_id}, not {resolve(env_id).short_id}: "
                             f"arena-eval {args.model} {trained_on.short_id}")
        env_kwargs = {**config.get("env_kwargs", {}), **dict(args.env_arg)}
        out = Path(args.out) if args.out else path.parent
        names = {"ppo": str(path), **{b: b for b in BASELINES}}
    elif pretrained.is_pretrained(args.model):  # played with the env arguments it was trained with
        env_kwargs = {**pretrained.load(args.model, env_id).env_kwargs, **dict(args.env_arg)}
        out = Path(args.out or "runs/eval")
        names = {args.model: args.model, **{b: b for b in BASELINES}}
    else:
        env_kwargs = {**load_config(env_id).get("env_kwargs", {}), **dict(args.env_arg)}
        out = Path(args.out or "runs/eval")
        names = {b: b for b in sorted(BASELINES, key=lambda b: b != args.model)}
    checked_env_arguments(env_id, env_kwargs)
    out.mkdir(parents=True, exist_ok=True)
    # who plays against whom: alone, or every agent against each baseline team
    matchups = ({f"{name} vs {rival}": (spec, rival) for name, spec in names.items() for rival in BASELINES}
                if is_team(env_id) else {name: (spec, None) for name, spec in names.items()})

    mode = False if args.stochastic else True if args.deterministic else None  # None: each agent's default

    def factory(spec):
        return agent_factory(spec, env_id, args.seed, mode, args.trust_pickle) if spec else None

    results = {name: play(factory(spec), env_id, args.episodes, args.seed, env_kwargs, factory(rival),
                          record=args.record, label=name)
               for name, (spec, rival) in matchups.items()}
    settings = ", ".join(f"{k}={v}" for k, v in env_kwargs.items())
    title = (f"{env_id} ({settings}), {args.episodes} episodes per row, seeds {args.seed}.."
             f"{args.seed + args.episodes - 1}"
             + (", stochastic policy" if args.stochastic else ", most likely actions" if args.deterministic else ""))
    if is_team(env_id):
        title += ("\n(blue vs red; return = blue's score minus red's, score = blue's, success = blue wins, "
                  "draw = the scores level)")
    table = format_table(results, title)
    print(table, flush=True)
    summary = {name: {f"{k}_{stat}": float(getattr(v, stat)()) for k, v in r.items() for stat in ("mean", "std")}
               for name, r in results.items()}
    (out / "eval.md").write_text(table + "\n")
    (out / "eval.json").write_text(json.dumps(summary, indent=2))
    written = [out / "eval.md", out / "eval.json"]
    if is_model:  # the whole run's curve, also when the model is one of its checkpoints
        panels, baselines = ((TEAM_PANELS, {b: summary[f"{b} vs scripted"] for b in BASELINES}) if is_team(env_id)
                             else (SINGLE_PANELS, {b: summary[b] for b in BASELINES}))
        curve = learning_curve(run_directory(path), panels, baselines, out / "learning_curve.png", env_id)
        written += [curve] if curve else []
    if args.rollout:
        spec, rival = next(iter(matchups.values()))
        written += record_rollout(factory(spec), env_id, args.seed, out, env_kwargs, factory(rival or "scripted"))
    if args.record:
        written.append(Path(args.record) / "episodes.jsonl")
    print("wrote " + ", ".join(str(p) for p in written))
    return summary


def main(argv: list[str] | None = None) -> int:
    """The ``arena-eval`` console script: a user's mistake is one line and exit status 2."""
    return arena_eval(argv)


if __name__ == "__main__":
    sys.exit(main())
