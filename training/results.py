"""``make results``: every headline run, its evaluation and the shipped policies, as JSON under ``docs/results/``.

    python -m arena_envs.training.results                      # 5 seeds x every headline (about four hours)
    python -m arena_envs.training.results --short --out /tmp/r # a few updates each: what CI runs

For each headline (:data:`HEADLINES`: each RL scenario, and team capture at 3v3 too) and each
seed, one command trains the scenario's headline config (``arena-train <scenario> --seed S --out
<runs>/<headline>/seed<S>``: whatever ``training/configs/ppo/<scenario>.yaml`` says, so a changed
config flows in, with the headline's ``--set`` on top), then the final policy plays
``--episodes`` held-out worlds (seeds 10000+, sampled actions; team capture as blue against the
scripted team), as do the random and scripted baselines. Written per headline,
``<out>/<headline>.json``:

- ``metric``: what "solved" means here, from :data:`METRICS` (the scripted forager's score,
  90% swords, a 50% win rate against the scripted team) and its threshold;
- per run: the final evaluation, the learning curve read from the run's ``progress*.csv``
  (wall seconds, steps, the metric), the time to solve (the first logged point at or over the
  threshold: its seconds and steps), the trainer's steps/s and the machine's load (``uptime``);
- the pretrained policy exported from the best run of a headline that ships one
  (``python -m arena_envs.training.export``) into the package
  (``arena_envs/pretrained/<scenario>.npz``; with ``--short``, beside the JSON).

``render_results.py`` turns the JSON into ``docs/results.md`` and its plots (IQM and 95%
stratified bootstrap intervals from ``rliable``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from arena_envs.cli import UsageError, run
from arena_envs.names import resolve
from arena_envs.training.common import agent_factory, apply_overrides, is_team, load_config, play
from arena_envs.training.evaluate import read_progress
from arena_envs.training.export import export

HELD_OUT = 10_000  # the first evaluation seed: training worlds never reach it


@dataclass(frozen=True)
class Metric:
    """What a scenario's result is and when it counts as solved."""

    name: str  # shown in the tables
    final: str  # the evaluation's key (of play()'s result, as a mean)
    columns: tuple[str, ...]  # progress.csv columns to read it from during training, the first found
    target: float | None  # the headline target (issue 32), None: relative to scripted
    solved_share: float  # solved: >= this share of the scripted baseline's value ...
    solved_absolute: float | None = None  # ... or, when set, this value


METRICS: dict[str, Metric] = {
    # the periodic evaluation's (sampled actions, held-out worlds: eval_stochastic in both configs) first: early in
    # a run the training episodes that have ended are the short, successful ones (Crafting's rollout success rate
    # read 1.0 after 90k steps, when no world had yet run out of time)
    "foraging": Metric("score (sampled actions)", "score", ("eval/score_mean", "rollout/score_mean"), None, 0.9),
    "crafting": Metric("iron sword rate", "success", ("eval/success_rate", "rollout/success_rate"), 0.9, 0.9),
    "team_capture": Metric("win rate against the scripted team", "success", ("eval/success_rate",), 0.6, 0.0,
                           solved_absolute=0.5),
}


@dataclass(frozen=True)
class Headline:
    """One headline result: a scenario's config (``training/configs/ppo/<scenario>.yaml``), with ``overrides``
    (``--set KEY=VALUE`` pairs) on top; the best run of a shipped one becomes ``pretrained:<scenario>``."""

    scenario: str
    overrides: tuple[str, ...] = ()
    label: str = ""  # how the page names it beside the env id
    ships: bool = True

    def config(self) -> dict[str, Any]:
        return apply_overrides(load_config(self.scenario, f"ppo/{self.scenario}"), list(self.overrides), "ppo")

    def flags(self) -> list[str]:
        return [flag for pair in self.overrides for flag in ("--set", pair)]


HEADLINES: dict[str, Headline] = {
    "foraging": Headline("foraging"),
    "crafting": Headline("crafting"),
    "team_capture": Headline("team_capture", label="2v2"),
    # issue 32's "report 3v3 as well": the 2v2 config, three agents a team; its policy is not shipped
    "team_capture_3v3": Headline("team_capture", ("env_kwargs.agents_per_team=3",), "3v3", ships=False),
}


def threshold(metric: Metric, scripted: float) -> float:
    return metric.solved_absolute if metric.solved_absolute is not None else metric.solved_share * scripted


def load() -> str:
    """The machine's load averages (1, 5, 15 min): every wall-clock figure is given with it."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} {five:.1f} {fifteen:.1f}"


def train_command(scenario: str, seed: int, out: Path, extra: list[str]) -> list[str]:
    """``arena-train <scenario> --seed S --out DIR``, as a module of this interpreter."""
    return [sys.executable, "-m", "arena_envs.training.train", resolve(scenario).short_id, "--seed", str(seed),
            "--out", str(out), "--no-progress", *extra]


def short_flags(config: dict[str, Any]) -> list[str]:
    """A few updates of a headline ``config`` on a small batch: CI's version of the run."""
    worlds = 16
    agents = 2 * config.get("env_kwargs", {}).get("agents_per_team", 2) if is_team(config["env_id"]) else 1
    per_update = worlds * int(config["ppo"]["n_steps"]) * agents
    return ["--n-envs", str(worlds), "--timesteps", str(4 * per_update),
            "--set", f"eval_every={2 * per_update}", "--set", "eval_episodes=4", "--set", "checkpoint_every=100000000"]


def curve(run_dir: Path, metric: Metric) -> dict[str, Any]:
    """The metric over training from the run's progress*.csv: its column, wall seconds, steps, value."""
    for column in metric.columns:
        rows, _ = read_progress(run_dir, column)
        if rows:
            return {"column": column, "seconds": [float(r["time/time_elapsed"]) for r in rows],
                    "steps": [float(r["time/total_timesteps"]) for r in rows],
                    "value": [float(r[column]) for r in rows]}
    return {"column": None, "seconds": [], "steps": [], "value": []}


def losses(run_dir: Path) -> dict[str, list[float]]:
    """The update's losses, first and last logged (CI checks that learning moves them)."""
    found = {}
    for column in ("train/value_loss", "train/policy_gradient_loss", "train/entropy_loss"):
        rows, _ = read_progress(run_dir, column)
        found[column] = [float(rows[0][column]), float(rows[-1][column])] if rows else []
    return found


def finished(command: list[str], folder: Path) -> bool:
    """Whether ``folder`` holds a finished run (``speed.json``) of exactly ``command``: its ``config.yaml``
    is what the command resolves to now (``--print-config``). Training is deterministic, so training
    it again would make the same run (its wall time and load are the ones its JSON gave it, if any)."""
    if not (folder / "speed.json").exists():
        return False
    printed = subprocess.run([*command, "--print-config"], check=True, capture_output=True, text=True).stdout
    return yaml.safe_load(printed) == yaml.safe_load((folder / "config.yaml").read_text())


def time_to_solve(points: dict[str, Any], level: float) -> dict[str, float] | None:
    """The first logged point at or over ``level``: its wall seconds and steps (None: never)."""
    for seconds, steps, value in zip(points["seconds"], points["steps"], points["value"], strict=True):
        if value >= level:
            return {"seconds": seconds, "steps": steps}
    return None


def evaluate(agent: str, scenario: str, episodes: int, env_kwargs: dict[str, Any]) -> dict[str, float]:
    """``agent`` (sampled actions) on ``episodes`` held-out worlds; team capture: as blue against scripted."""
    opponent = agent_factory("scripted", scenario, HELD_OUT) if is_team(scenario) else None
    result = play(agent_factory(agent, scenario, HELD_OUT, deterministic=False), scenario, episodes, HELD_OUT,
                  env_kwargs, opponent)
    return {f"{key}_mean": float(values.mean()) for key, values in result.items()}


def scenario_results(name: str, seeds: list[int], runs: Path, out: Path, episodes: int, short: bool,
                     jobs: int = 1, reuse: bool = False) -> Path:
    """Train every seed of the headline ``name`` (``jobs`` runs at once; with ``reuse``, not those already
    finished), evaluate each; write ``<out>/<name>.json``; ship the best policy if the headline ships."""
    headline = HEADLINES[name]
    scenario, metric, config = headline.scenario, METRICS[headline.scenario], headline.config()
    env_kwargs = config.get("env_kwargs", {})
    baselines = {agent: evaluate(agent, scenario, episodes, env_kwargs) for agent in ("random", "scripted")}
    level = threshold(metric, baselines["scripted"][f"{metric.final}_mean"])
    results = []

    def train(seed: int) -> tuple[list[str], str | None, float | None, str | None]:
        folder = runs / name / f"seed{seed}"
        command = train_command(scenario, seed, folder, headline.flags() + (short_flags(config) if short else []))
        if reuse and finished(command, folder):
            return command, None, None, None
        before, start = load(), time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        return command, before, time.perf_counter() - start, load()  # the load as this run ends

    with ThreadPoolExecutor(jobs) as pool:  # each run is a process of its own: threads only wait for them
        trained = list(pool.map(train, seeds))
    path = out / f"{name}.json"
    earlier = json.loads(path.read_text())["runs"] if path.exists() else []
    for seed, (command, before, wall, after) in zip(seeds, trained, strict=True):
        folder = runs / name / f"seed{seed}"
        speed = json.loads((folder / "speed.json").read_text())
        kept = wall is None
        if kept:  # a reused run keeps the wall time and load its JSON gave it when it was trained
            same = [r for r in earlier if r["run"] == str(folder) and r["train_seconds"] == speed["seconds"]]
            before, wall, after, at_once = ((same[0]["load_before"], same[0]["wall_seconds"], same[0]["load_after"],
                                             same[0]["runs_at_once"]) if same else (None, None, None, None))
        else:
            at_once = jobs
        final = evaluate(str(folder / "model.zip"), scenario, episodes, env_kwargs)
        points = curve(folder, metric)
        results.append({"seed": seed, "run": str(folder), "command": " ".join(["arena-train", *command[3:]]),
                        "final": final, "value": final[f"{metric.final}_mean"], "curve": points,
                        "solved": time_to_solve(points, level), "losses": losses(folder),
                        "steps": speed["timesteps"], "train_seconds": speed["seconds"], "wall_seconds": wall,
                        "steps_per_s": speed["steps_per_s"], "load_before": before, "load_after": after,
                        "runs_at_once": at_once})
        took = "(the run found there)" if kept else f"in {wall:.0f} s (load {results[-1]['load_after']})"
        print(f"{name} seed {seed}: {metric.name} {results[-1]['value']:.3f} {took}", flush=True)
    best = max(results, key=lambda r: r["value"])
    shipped = None
    if headline.ships:
        file = export(best["run"], out / "pretrained" / f"{scenario}.npz" if short else None)
        shipped = {"file": str(file), "run": best["run"], "seed": best["seed"]}
    label = " ".join(filter(None, (resolve(scenario).short_id, headline.label)))
    document = {"name": name, "scenario": scenario, "env_id": resolve(scenario).short_id, "label": label,
                "short": short,
                "metric": {**asdict(metric), "threshold": level}, "episodes": episodes, "seeds": seeds,
                "eval_seeds": [HELD_OUT, HELD_OUT + episodes - 1], "env_kwargs": env_kwargs,
                "baselines": baselines, "runs": results,
                "pretrained": shipped,
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    path.write_text(json.dumps(document, indent=1))
    return path


# The ladder's teams (training/ladder.py): the pure teams and the mixed ones, {llm} an LLM seat. The LLM
# teams come first: with one game a pair (--llm-games 1) the first team of a pair plays blue, so each LLM
# team plays the scripted team as blue.
LADDER_TEAMS = ("{label}={llm}", "{label}+pretrained={llm}+pretrained", "{label}+scripted={llm}+scripted",
                "scripted", "pretrained", "pretrained+scripted", "random")


def ladder_results(out: Path, games: int, llm_games: int, short: bool) -> Path:
    """``arena-eval --ladder`` of :data:`LADDER_TEAMS` into ``<out>/ladder.json`` (and its table and
    plot): the LLM seats are SmolLM2-135M behind llama.cpp's server (``smollm2``, hermes calls in text),
    or with ``short`` the scripted model behind the scripted server."""
    from arena_envs.training.ladder import ladder

    if short:
        from arena_envs.llm.server import ScriptedModelServer

        server, label, model, flags = ScriptedModelServer(), "scripted-llm", "scripted", []
    else:
        from arena_envs.llm.llama_server import LlamaServer

        # hermes calls in text (tools in the prompt), at most 32 tokens: the grammar-constrained smollm2-tools
        # held llama.cpp's one slot for over 15 minutes on one reply (its call's arguments ignore max_tokens)
        server, label, model = LlamaServer(threads=2), "smollm2", "smollm2"
        # one reply per LLM seat a game, then it carries on: a reply took ~100 s of a loaded machine (load 10)
        flags = ["--llm-format", "hermes", "--llm-no-tools", "--llm-max-tokens", "32", "--llm-temperature", "0.7",
                 "--llm-turns", "1", "--timeout", "240"]
    with server:
        llm = f"llm:{model}@{server.base_url}"
        teams = [team.format(label=label, llm=llm) for team in LADDER_TEAMS]
        ladder([*teams, "--games", str(games), "--llm-games", str(llm_games), "--out", str(out), *flags])
    return out / "ladder.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m arena_envs.training.results", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/results", help="where the JSON goes (default docs/results)")
    parser.add_argument("--runs", default="runs/results", help="where the runs go (default runs/results)")
    parser.add_argument("--seeds", type=int, default=5, help="training seeds per scenario (default 5)")
    parser.add_argument("--episodes", type=int, default=200, help="held-out episodes per evaluation (default 200)")
    parser.add_argument("--only", nargs="+", choices=[*HEADLINES, "ladder"],
                        help="these headlines (or the ladder) only")
    parser.add_argument("--ladder-games", type=int, default=200, help="ladder games per pair of policies (default 200)")
    parser.add_argument("--llm-games", type=int, default=1,
                        help="ladder games per pair with an LLM seat (default 1, 24 replies in all: SmolLM2 on 2 CPU "
                             "cores took ~100 s a reply under load)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="training runs at once (default 1: each run's wall time is its own; 2 on 2 cores nearly "
                             "halves the total, and each run then shares the machine: the JSON says runs_at_once)")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the finished runs already under --runs whose config is the one a run would have "
                             "now (training is deterministic; each keeps the wall time and load its JSON gave it): an "
                             "interrupted make results picks up where it stopped")
    parser.add_argument("--short", action="store_true", help="a few updates per run (CI); its policies stay in --out")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    out, runs = Path(args.out), Path(args.runs)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.only or [*HEADLINES, "ladder"]:
        if name == "ladder":
            games, llm_games = (4, 4) if args.short else (args.ladder_games, args.llm_games)
            print(f"wrote {ladder_results(out, games, llm_games, args.short)}")
            continue
        if (runs / name).exists() and not args.reuse:
            raise UsageError(f"{runs / name} holds runs already: move it away, choose another --runs or --reuse "
                             f"the finished ones")
        seeds = list(range(args.seeds))
        written = scenario_results(name, seeds, runs, out, args.episodes, args.short, args.jobs, args.reuse)
        print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(run("results", main, sys.argv[1:], extra="train"))
