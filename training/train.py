"""``arena-train``: PPO on an arena scenario, stepping the native numpy batch.

    arena-train Foraging-v0 --out runs/foraging             # the lean PPO (training/ppo.py)
    arena-train Foraging-v0 --num-workers 2 --out runs/f2   # ... its batch stepped by 2 processes
    arena-train Foraging-v0 --algo sb3-ppo --timesteps 3000000 --n-envs 64 --seed 0 --out runs/sb3
    arena-train Foraging-v0 --out runs/foraging --resume    # continue from the last checkpoint
    arena-train team_capture_v0 --out runs/team_capture   # self-play: one policy plays every agent
    arena-train TeamCapture-v0 --set ppo.learning_rate=1e-3 --num-envs 128 --capture-video   # overrides, GIFs
    arena-train --list                                      # the scenarios and their configs, the other configs
    arena-train Foraging-v0 --algo sb3-ppo --vec dummy --timesteps 300000 --out runs/dummy   # speed reference
    arena-train TreasureHunt-v0 --algo sft --model DIR --gguf-file F.gguf --out runs/sft  # an LLM (training/llm_*.py)
    arena-train TreasureHunt-v0 --algo grpo --model runs/sft --out runs/grpo             # ... then GRPO through TRL

``--algo ppo`` (the default) is the lean CleanRL-style PPO of :mod:`arena_envs.training.ppo`,
configured by ``training/configs/ppo/<scenario>.yaml``; ``--algo sb3-ppo`` is
Stable-Baselines3's PPO, configured by ``training/configs/<scenario>.yaml``. ``--config``
replaces either; the flags override it (in team capture ``--n-envs`` counts worlds and
``--timesteps`` agent steps). Both write the same run directory, ``--out``:

    config.yaml       the resolved config (arena-eval rebuilds the encoding from it)
    progress*.csv     one row per PPO update: SB3's metrics plus episode score and success
                      (and eval/* rows of the periodic evaluation when the config asks for one)
    tb/               the same for TensorBoard (tensorboard --logdir runs)
    checkpoints/      ppo_<steps>_steps.zip (and the VecNormalize statistics, or the lean
                      trainer's ppo_<steps>_steps.pt, beside it)
    model.zip         the final policy, an SB3 PPO model either way; speed.json (steps/s, env share)
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np
import torch
import yaml
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback
from stable_baselines3.common.logger import Logger, make_output_format
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper, VecMonitor, VecNormalize

from arena_envs.cli import UsageError, arena_train, checked_env_arguments
from arena_envs.names import SCENARIOS, find
from arena_envs.sharded import WorkerError
from arena_envs.training import ppo
from arena_envs.training.common import (
    CONFIG_DIR,
    ModelAgent,
    agent_factory,
    apply_overrides,
    config_names,
    is_team,
    load_config,
    make_vec_env,
    play,
    scenario_name,
    score_text,
    set_torch_threads,
    success,
    trainable,
)
from arena_envs.training.evaluate import record_rollout
from arena_envs.wrappers.flatten import FlatEncoding


class EpisodeStats(BaseCallback):
    """Logs the mean score and success rate of the last 100 episodes with each PPO update."""

    def __init__(self, env_id: str):
        super().__init__()
        self.env_id = env_id
        self.scores: deque[float] = deque(maxlen=100)
        self.successes: deque[float] = deque(maxlen=100)

    def _on_step(self) -> bool:
        for i in np.flatnonzero(self.locals["dones"]):
            info = self.locals["infos"][i]
            if "score" not in info:  # team capture: the periodic evaluation tells how it goes
                continue
            self.scores.append(info["score"])
            self.successes.append(float(success(info)))
        return True

    def _on_rollout_end(self) -> None:
        if self.scores:  # none before the first episode ends: no row rather than a score of 0
            self.logger.record("rollout/score_mean", float(np.mean(self.scores)))
            self.logger.record("rollout/success_rate", float(np.mean(self.successes)))
            self.logger.record("rollout/score_episodes", len(self.scores))


class PeriodicEval(BaseCallback):
    """Every ``every`` steps, the policy plays ``episodes`` held-out worlds (as blue against ``opponent``
    in team capture), its most likely actions or, with the config's ``eval_stochastic``, sampled ones;
    logs eval/return_mean, eval/score_mean, eval/success_rate."""

    def __init__(self, config: dict, every: int, episodes: int, opponent: str = "scripted", seed: int = 10_000):
        super().__init__()
        self.config, self.every, self.episodes, self.opponent, self.seed = config, every, episodes, opponent, seed
        self.next = 0

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.next:
            self.next = self.num_timesteps + self.every
            env_id = self.config["env_id"]

            def make_agent(envs):
                return ModelAgent(self.model, FlatEncoding.for_env(envs, **self.config.get("encoding", {})),
                                  deterministic=not self.config.get("eval_stochastic", False))

            result = play(make_agent, env_id, self.episodes, self.seed, self.config.get("env_kwargs", {}),
                          agent_factory(self.opponent, env_id, self.seed))
            for key in ("return", "score", "success"):
                self.logger.record(f"eval/{key}_{'rate' if key == 'success' else 'mean'}", float(result[key].mean()))
        return True


class EveryCheckpoint(BaseCallback):
    """Calls ``action(model, steps)`` every ``every`` steps (``--capture-video``: a rollout GIF)."""

    def __init__(self, every: int, action):
        super().__init__()
        self.every, self.action, self.next = every, action, every

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.next:
            self.next = self.num_timesteps + self.every
            self.action(self.model, self.num_timesteps)
        return True


def capture_video(config: dict, folder: Path, model, steps: int) -> Path:
    """One episode of ``model`` (an SB3 PPO or the lean PPO's agent: anything with ``predict``) in
    the held-out world 10000, as ``<folder>/rollout_<steps>_steps.gif`` (and its ``.jsonl``); in
    team capture the model plays blue against the scripted team."""
    env_id = config["env_id"]
    folder.mkdir(parents=True, exist_ok=True)

    def make_agent(envs):
        return ModelAgent(model, FlatEncoding.for_env(envs, **config.get("encoding", {})))

    opponent = agent_factory("scripted", env_id) if is_team(env_id) else None
    gif, _ = record_rollout(make_agent, env_id, 10_000, folder, config.get("env_kwargs", {}), opponent,
                            name=f"rollout_{steps}_steps")
    return gif


class VecEnvTimer(VecEnvWrapper):
    """Adds up the wall time spent inside the envs (reset and step), to report its share."""

    def __init__(self, venv: VecEnv):
        super().__init__(venv)
        self.seconds = 0.0

    def reset(self):
        start = time.perf_counter()
        obs = self.venv.reset()
        self.seconds += time.perf_counter() - start
        return obs

    def step_wait(self):
        start = time.perf_counter()
        result = self.venv.step_wait()
        self.seconds += time.perf_counter() - start
        return result


class WallClockLimit(BaseCallback):
    """Stops training after ``minutes`` of wall time."""

    def __init__(self, minutes: float):
        super().__init__()
        self.deadline = time.monotonic() + 60 * minutes

    def _on_step(self) -> bool:
        return time.monotonic() < self.deadline


ALGOS = ("ppo", "sb3-ppo", "sft", "grpo")
LLM_ALGOS = ("sft", "grpo")  # a language model on a chat environment: their own flags (training/llm_common.py)


def algo_config(env: str, algo: str) -> Path:
    """The scenario's config for ``algo``: ``configs/ppo/<scenario>.yaml`` or ``configs/<scenario>.yaml``."""
    name = f"{scenario_name(env)}.yaml"
    return CONFIG_DIR / "ppo" / name if algo == "ppo" else CONFIG_DIR / name


def latest_checkpoint(folder: Path) -> tuple[Path, int] | None:
    """The checkpoint with the most timesteps in ``folder``, and its timesteps."""
    found = [(int(m.group(1)), p) for p in folder.glob("ppo_*_steps.zip")
             if (m := re.fullmatch(r"ppo_(\d+)_steps\.zip", p.name))]
    if not found:
        return None
    steps, path = max(found)
    return path, steps


# CleanRL's flag names for the keys changed most often: each one is a --set of its key
FLAGS = {"total_timesteps": ("timesteps", int, "total env steps (agent steps in team capture)"),
         "num_envs": ("n_envs", int, "worlds in the batch"),
         "learning_rate": ("ppo.learning_rate", float, "the optimiser's learning rate"),
         "num_steps": ("ppo.n_steps", int, "rollout length per world before each update"),
         "ent_coef": ("ppo.ent_coef", float, "entropy bonus coefficient"),
         "gamma": ("ppo.gamma", float, "discount factor")}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="arena-train", description=__doc__.split("\n\n")[0])
    parser.add_argument("env", nargs="?", help="scenario, any spelling: Foraging-v0, arena_envs/Foraging-v0, foraging, "
                                               "TeamCapture-v0, team_capture_v0 ... (--list shows them)")
    parser.add_argument("--list", action="store_true", help="list the scenarios and the shipped configs, and exit")
    parser.add_argument("--print-config", action="store_true",
                        help="print the resolved config (the scenario's, with --set and the flags applied) and exit")
    parser.add_argument("--algo", choices=ALGOS,
                        help="ppo: the lean PPO (the default); sb3-ppo: Stable-Baselines3's (the default for a "
                             "--config or a resumed run without an algo key: configs written before the lean PPO); "
                             "sft, grpo: a language model (arena-train ENV --algo grpo --help)")
    parser.add_argument("--timesteps", type=int, help="total env steps (default: the config's)")
    parser.add_argument("--n-envs", type=int, help="worlds in the batch (default: the config's)")
    parser.add_argument("--seed", type=int, help="seed of the run: world i of the batch starts from seed + i")
    parser.add_argument("--num-workers", type=int,
                        help="--algo ppo: processes stepping the batch (default: the config's)")
    for flag, (key, kind, text) in FLAGS.items():
        parser.add_argument(f"--{flag.replace('_', '-')}", type=kind, help=f"{text} (sets {key})")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="set a config key, e.g. ppo.learning_rate=1e-3 or env_kwargs.layout=classic "
                             "(the value is YAML); repeatable")
    parser.add_argument("--capture-video", action="store_true",
                        help="record one episode of the policy as a GIF in <out>/videos/ at every checkpoint")
    parser.add_argument("--out", default=None, help="run directory (default runs/<scenario>)")
    parser.add_argument("--config", help="YAML config to use instead of the scenario's: a path or a name of --list")
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    parser.add_argument("--max-minutes", type=float, help="stop after this much wall time")
    parser.add_argument("--vec", choices=("native", "dummy"), default="native",
                        help="native batch (default) or a DummyVecEnv of single envs, to compare speed")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--verbose", type=int, default=0, help="1 prints SB3's table after each update")
    args = parser.parse_args(argv)
    if not args.list and not args.env:
        parser.error("the scenario is required (arena-train --list shows them)")
    return args


def train_llm(argv: list[str] | None) -> Path:
    """``--algo sft|grpo``: a language model on a chat environment (training/llm_sft.py, llm_grpo.py)."""
    from importlib import import_module

    from arena_envs.training import llm_common

    args = llm_common.parse_args(argv)
    config, out, checkpoint = llm_common.prepare_run(args)
    try:
        model = import_module(f"arena_envs.training.llm_{config['algo']}").train(config, out, checkpoint)
    except (MemoryError, RuntimeError) as error:
        if not llm_common.out_of_memory(error):
            raise
        kept = llm_common.last_checkpoint(out / "checkpoints")
        smaller = "--batch-size or --max-length" if config["algo"] == "sft" else \
            "--group-size, --groups or --max-completion-tokens"
        raise SystemExit(f"arena-train: out of memory ({llm_common.first_line(error)}); the last checkpoint is kept "
                         f"({kept or 'none yet'}): lower {smaller} and run the same command with --resume") from None
    print(f"wrote {out} (the trained model: {model})")
    return out


def listing() -> str:
    """``arena-train --list``: the scenarios with their configs, then the other shipped configs."""
    names = config_names()
    lines = ["scenarios (arena-train SCENARIO; every spelling in docs/guide/names-and-cli.md):"]
    for s in SCENARIOS.values():
        own = [f"{n} (--algo {'ppo' if n.startswith('ppo/') else 'sb3-ppo'})" for n in (f"ppo/{s.key}", s.key)
               if n in names]
        lines.append(f"  {s.short_id:<16} {', '.join(own) if own else 'none: a text env, play it with arena-agent'}")
    scenario_configs = {n for s in SCENARIOS.values() for n in (s.key, f"ppo/{s.key}")}
    lines.append("other configs (arena-train SCENARIO --config NAME):")
    lines += [f"  {n}" for n in names if n not in scenario_configs]
    return "\n".join(lines)


def train(argv: list[str] | None = None) -> Path | None:
    """Run ``arena-train`` with these arguments; the run directory (None for ``--list``)."""
    algo = argparse.ArgumentParser(add_help=False)
    algo.add_argument("--algo")
    if algo.parse_known_args(argv)[0].algo in LLM_ALGOS:
        return train_llm(argv)
    args = parse_args(argv)
    if args.list:
        print(listing())
        return None
    if find(args.env) is None and args.env in config_names():  # a config named where the scenario goes
        owner = next((s.short_id for s in SCENARIOS.values() if args.env.split("/")[-1].startswith(s.key)), "ENV")
        raise UsageError(f"{args.env!r} is a config, not a scenario: arena-train {owner} --config {args.env}")
    scenario = trainable(args.env)

    # 1. the config: the scenario's YAML, the flags on top; a resumed run keeps its own
    config = load_config(scenario.key, args.config or algo_config(scenario.key, args.algo or "ppo"))
    out = Path(args.out or f"runs/{scenario.key}")
    checkpoints = out / "checkpoints"
    resume = latest_checkpoint(checkpoints)
    if resume and not args.resume and not args.print_config:
        raise UsageError(f"{out} holds a run already: pass --resume to continue it, or choose another --out")
    if args.resume and resume is None:
        print(f"no checkpoint in {checkpoints}: starting a new run")
    if resume:
        config = yaml.safe_load((out / "config.yaml").read_text())
    # a config names its trainer; one without (written for SB3 before the lean PPO) runs SB3's
    # unless --algo says otherwise, so that one config can be trained both ways
    algo = args.algo or config.get("algo", "sb3-ppo")
    if resume and config.get("algo", "sb3-ppo") != algo:
        raise UsageError(f"{out} was trained with --algo {config.get('algo', 'sb3-ppo')}: resume it with that")
    if config.get("algo") == "ppo" and algo != "ppo":
        raise UsageError("this config is the lean PPO's (algo: ppo); SB3's are training/configs/<scenario>.yaml")
    config["algo"] = algo
    flags = [f"{key}={getattr(args, key)}" for key in ("timesteps", "n_envs", "seed", "num_workers")
             if getattr(args, key) is not None]
    flags += [f"{key}={getattr(args, flag)}" for flag, (key, _, _) in FLAGS.items() if getattr(args, flag) is not None]
    flags += ["capture_video=true"] if args.capture_video else []
    apply_overrides(config, [*flags, *args.set], algo)
    checked_env_arguments(scenario.key, config.get("env_kwargs", {}))
    if args.print_config:
        print(yaml.safe_dump(config, sort_keys=False), end="")
        return None
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    capture = functools.partial(capture_video, config, out / "videos") if config.get("capture_video") else None
    if algo == "ppo":
        if args.vec != "native":
            raise UsageError("--vec applies to --algo sb3-ppo only")
        try:
            speed = ppo.train(config, out, resume=bool(resume), max_minutes=args.max_minutes,
                              progress=not args.no_progress, on_checkpoint=capture)
        except WorkerError as error:  # a worker died or hung; the run is saved: one line, exit status 1
            raise SystemExit(f"\narena-train: error: {error}") from None
        learner = f", {speed['learner_cpu_seconds']:.1f} s of it the learner's" if speed["async_learner"] else ""
        print(f"{speed['timesteps']:,} steps in {speed['seconds']:.0f} s: {speed['steps_per_s']:,.0f} steps/s, "
              f"{100 * speed['env_share']:.0f}% of the time in the env, {speed['cpu_seconds']:.1f} s of CPU{learner}; "
              f"{score_text(speed['score_mean'], speed['score_episodes'])}; wrote {out}")
        return out

    # 2. seeds and threads (one by default: see set_torch_threads)
    set_torch_threads(config)
    set_random_seed(config["seed"])

    # 3. envs: the native batch, timed, with episode statistics and normalised rewards
    timer = VecEnvTimer(make_vec_env(config, config["n_envs"], vec=args.vec))
    venv = VecMonitor(timer)
    if config.get("normalize_reward", False):
        saved = resume and checkpoints / f"ppo_vecnormalize_{resume[1]}_steps.pkl"
        if saved and saved.exists():
            venv = VecNormalize.load(str(saved), venv)
        else:
            venv = VecNormalize(venv, norm_obs=False, gamma=config["ppo"].get("gamma", 0.99))

    # 4. the model: fresh, or the latest checkpoint
    if resume:
        model = PPO.load(resume[0], env=venv, device="cpu")
        # PPO.load seeds everything with the run's seed again, which would replay the worlds (and
        # the action samples) the run started with: a resumed segment gets a seed of its own
        segment_seed = int(np.random.SeedSequence([config["seed"], resume[1]]).generate_state(1)[0])
        model.set_random_seed(segment_seed)
        print(f"resuming from {resume[0]} ({resume[1]:,} steps), seed {segment_seed}")
    else:
        model = PPO(config.get("policy", "MlpPolicy"), venv, seed=config["seed"], device="cpu",
                    policy_kwargs=config.get("policy_kwargs"), **config.get("ppo", {}))
    suffix = f"-from-{model.num_timesteps}" if resume else ""
    formats = [make_output_format("csv", str(out), suffix), make_output_format("tensorboard", str(out / "tb"))]
    if args.verbose:
        formats.append(make_output_format("stdout", str(out)))
    model.set_logger(Logger(str(out), formats))

    # 5. learn, checkpointing as we go
    callbacks = [EpisodeStats(config["env_id"]),
                 CheckpointCallback(max(config.get("checkpoint_every", 500_000) // config["n_envs"], 1),
                                    str(checkpoints), name_prefix="ppo", save_vecnormalize=True)]
    if config.get("eval_every"):
        callbacks.append(PeriodicEval(config, config["eval_every"], config.get("eval_episodes", 32)))
    if args.max_minutes:
        callbacks.append(WallClockLimit(args.max_minutes))
    if capture:
        callbacks.append(EveryCheckpoint(config.get("checkpoint_every", 500_000), capture))
    start_steps, start = model.num_timesteps, time.perf_counter()
    model.learn(max(config["timesteps"] - model.num_timesteps, 0), callback=callbacks,
                progress_bar=not args.no_progress, reset_num_timesteps=not resume)
    seconds = time.perf_counter() - start

    # 6. the final model (also as the last checkpoint, for --resume) and how fast it went
    for path in (out / "model.zip", checkpoints / f"ppo_{model.num_timesteps}_steps.zip"):
        model.save(path)
    if isinstance(venv, VecNormalize):
        for path in (out / "vecnormalize.pkl", checkpoints / f"ppo_vecnormalize_{model.num_timesteps}_steps.pkl"):
            venv.save(str(path))
    steps, seconds = model.num_timesteps - start_steps, max(seconds, 1e-9)
    speed = {"vec": args.vec, "n_envs": config["n_envs"], "timesteps": model.num_timesteps, "seconds": seconds,
             "steps_per_s": steps / seconds, "env_share": timer.seconds / seconds,
             "torch_threads": torch.get_num_threads()}
    (out / "speed.json").write_text(json.dumps(speed, indent=2))
    if capture:
        capture(model, model.num_timesteps)
    scores = callbacks[0].scores
    print(f"{steps:,} steps in {seconds:.0f} s: {speed['steps_per_s']:,.0f} steps/s, "
          f"{100 * speed['env_share']:.0f}% of the time in the env; "
          f"{score_text(np.mean(scores) if scores else None, len(scores))}; wrote {out}")
    venv.close()
    return out


def main(argv: list[str] | None = None) -> int:
    """The ``arena-train`` console script: a user's mistake is one line and exit status 2."""
    return arena_train(argv)


if __name__ == "__main__":
    sys.exit(main())
