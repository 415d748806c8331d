"""PPO from RLlib (Ray) on an arena scenario: a local Ray instance by default, a cluster with ``--address``.

    python -m arena_envs.training.rllib_ppo Foraging-v0 --iterations 20
    python -m arena_envs.training.rllib_ppo TeamCapture-v0 --separate-policies --iterations 20

On a cluster (the extra ``pip install 'arena-envs[ray]'`` on every machine):

    ray start --head                                              # on the head machine
    ray start --address <head-ip>:6379                            # on each other machine
    python -m arena_envs.training.rllib_ppo Foraging-v0 --address auto --env-runners 32

Each EnvRunner steps one native numpy batch of ``--envs-per-runner`` worlds (Foraging,
Crafting) or that many Team Capture worlds as RLlib multi-agent envs
(:mod:`arena_envs.wrappers.rllib`); the learner runs PPO on what they sample. One line per
iteration: env steps so far, episodes, mean episode return and the env's own score.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from arena_envs.cli import UsageError, checked_env_arguments, rllib_ppo
from arena_envs.names import resolve

RLLIB_SCENARIOS = ["foraging", "crafting", "team_capture"]  # the scenarios with arrays to train on


def env_id(name: str) -> str:
    """``Foraging-v0``, ``arena_envs/Foraging-v0``, ``team_capture_v0`` ... -> the registered id
    (:mod:`arena_envs.names`); a name without an RLlib env raises a one-line ``UnknownNameError``."""
    return resolve(name, among=RLLIB_SCENARIOS).env_id


def build_config(env: str, *, env_runners: int = 2, envs_per_runner: int = 64, env_config: dict | None = None,
                 separate_policies: bool = False, train_batch_size: int = 4096, minibatch_size: int = 1024,
                 epochs: int = 4, lr: float = 3e-4, seed: int = 0, hidden: tuple[int, ...] = (64, 64)):
    """The ``PPOConfig`` for ``env`` (an id of :func:`env_id`)."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    from arena_envs.wrappers.rllib import MULTI_AGENT_ENVS, team_capture_policies

    multi_agent = env in MULTI_AGENT_ENVS
    config = (
        PPOConfig()
        .environment(env, env_config=env_config or {})
        .env_runners(num_env_runners=env_runners, num_envs_per_env_runner=envs_per_runner,
                     gym_env_vectorize_mode="sync" if multi_agent else "vector_entry_point",
                     rollout_fragment_length="auto", num_cpus_per_env_runner=1)
        .training(train_batch_size_per_learner=train_batch_size, minibatch_size=minibatch_size,
                  num_epochs=epochs, lr=lr, gamma=0.99, lambda_=0.95, entropy_coeff=0.01)
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=list(hidden), fcnet_activation="tanh",
                                                   vf_share_layers=False))
        .debugging(seed=seed)
    )
    if multi_agent:
        config = config.multi_agent(**team_capture_policies(shared=not separate_policies))
    return config


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """What one iteration reports that a reader wants: steps so far, and the episodes that ended
    in this iteration (how many, their mean return and length, per agent in team capture)."""
    runners = result.get("env_runners", {})
    return {"iteration": result.get("training_iteration"),
            "env_steps": runners.get("num_env_steps_sampled_lifetime"),
            "episodes_lifetime": runners.get("num_episodes_lifetime"),
            "episodes": runners.get("num_episodes"),
            "episode_return_mean": runners.get("episode_return_mean"),
            "episode_len_mean": runners.get("episode_len_mean"),
            "agent_returns": runners.get("agent_episode_returns_mean")}


def env_episodes(algo) -> list[list[dict[str, Any]]]:
    """Every episode the EnvRunners' envs recorded themselves (:mod:`arena_envs.wrappers.rllib`), in
    the order they ended, one list per EnvRunner."""

    def collect(runner):
        env = runner.env
        if hasattr(env, "envs"):  # RLlib's vector of multi-agent envs
            return [e for sub in env.envs for e in sub.unwrapped.episodes]
        while not hasattr(env, "episodes"):
            env = env.env
        return list(env.episodes)

    group = algo.env_runner_group  # with no remote EnvRunner (--env-runners 0) the local one samples
    return group.foreach_env_runner(collect, local_env_runner=group.num_remote_env_runners() == 0)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rllib_ppo", description=__doc__.split("\n\n")[0])
    parser.add_argument("env", help="Foraging-v0, Crafting-v0 or TeamCapture-v0")
    parser.add_argument("--address", help="Ray cluster to join (auto, or <head-ip>:6379); default: a local one")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--env-runners", type=int, default=2,
                        help="EnvRunner actors sampling in parallel (0: the driver samples itself)")
    parser.add_argument("--envs-per-runner", type=int, default=64, help="worlds each EnvRunner steps")
    parser.add_argument("--train-batch", type=int, default=4096, help="env steps per PPO update")
    parser.add_argument("--separate-policies", action="store_true", help="team capture: one policy per team")
    parser.add_argument("--env-config", default="{}", help='env arguments as JSON, e.g. \'{"layout": "classic"}\'')
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="save the final checkpoint here")
    return parser.parse_args(argv)


def plain(value: Any) -> Any:
    """A numpy scalar or array in RLlib's results as the number or list ``json`` can write."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


def main(argv: list[str] | None = None) -> int:
    """``python -m arena_envs.training.rllib_ppo``: a user's mistake is one line and exit status 2."""
    return rllib_ppo(argv)


def train(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run PPO with these arguments; one summary per iteration (also printed as a JSON line)."""
    args = parse_args(argv)
    scenario = env_id(args.env)  # a bad name fails before Ray starts
    try:
        env_config = json.loads(args.env_config)
    except ValueError as error:
        raise UsageError(f"--env-config is not JSON: {error}") from None
    checked_env_arguments(scenario, {k: v for k, v in env_config.items() if k != "encoding"})
    import ray

    from arena_envs.wrappers.rllib import register

    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(num_cpus=max(args.env_runners + 1, 2), include_dashboard=False)
    register()
    config = build_config(scenario, env_runners=args.env_runners, envs_per_runner=args.envs_per_runner,
                          env_config=env_config, separate_policies=args.separate_policies,
                          train_batch_size=args.train_batch, minibatch_size=min(1024, args.train_batch),
                          seed=args.seed)
    algo = config.build_algo()
    rows, start = [], time.perf_counter()
    for _ in range(args.iterations):
        row = summary(algo.train())
        row["seconds"] = round(time.perf_counter() - start, 1)
        episodes = [e for runner in env_episodes(algo) for e in runner[-100:]]
        if episodes:  # the env's own score of the last 100 episodes of each EnvRunner
            row["score_mean"] = float(np.mean([e["score"] for e in episodes]))
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if v is not None}, default=plain), flush=True)
    if args.out:
        print("checkpoint:", algo.save_to_path(str(Path(args.out).resolve())))
    algo.stop()
    ray.shutdown()
    return rows


if __name__ == "__main__":
    sys.exit(main())
