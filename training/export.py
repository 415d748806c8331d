"""Export a trained run as a pretrained policy of the package (a numpy ``.npz``, no torch to play it).

    python -m arena_envs.training.export runs/foraging            # -> arena_envs/pretrained/foraging.npz
    python -m arena_envs.training.export runs/crafting/model.zip --out crafting.npz

The run is any ``arena-train`` run directory (or one of its models: ``model.zip``, a
``checkpoints/ppo_<steps>_steps.zip``): the lean PPO and Stable-Baselines3 write the same SB3
model, an actor MLP (``mlp_extractor.policy_net``) and its head (``action_net``), which is
all a policy needs to play. The file keeps the run's flat encoding and env arguments, so the
agent rebuilds exactly what the model was trained on, and names the run that made it
(:mod:`arena_envs.pretrained`). A shipped policy stays small: over ``--max-bytes`` (1 MB)
the export fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from arena_envs.cli import UsageError, run
from arena_envs.names import resolve
from arena_envs.pretrained import PretrainedPolicy, path_of
from arena_envs.training.common import holding, run_config, run_directory

MAX_BYTES = 1_000_000


def sb3_actor(model: Path, activation: str = "tanh"
              ) -> tuple[list[tuple[np.ndarray, np.ndarray]], tuple[np.ndarray, np.ndarray]]:
    """The actor's layers and head, as (in, out) numpy weights, from an SB3 model zip: its weights
    alone, nothing of the zip unpickled (``training/weights.py``)."""
    from arena_envs.training.weights import actor_weights

    weights = actor_weights(model, activation)

    def pair(weight, bias) -> tuple[np.ndarray, np.ndarray]:
        return weight.numpy().T.copy(), bias.numpy().copy()

    return [pair(*layer) for layer in weights.layers], pair(*weights.head)


def export(spec: str | Path, out: str | Path | None = None, max_bytes: int = MAX_BYTES) -> Path:
    """Write the policy of the run or model ``spec`` to ``out`` (default: the package's file for its
    scenario); returns the path written."""
    path = Path(spec)
    model = path / "model.zip" if path.is_dir() else path
    if not model.exists():
        raise UsageError(f"{spec} is neither a run directory with a model.zip nor a model")
    config = run_config(model)
    scenario = resolve(config["env_id"]).key
    policy_kwargs = config.get("policy_kwargs") or {}
    if config.get("encoding", {}).get("dict_obs") or config.get("policy", "MlpPolicy") != "MlpPolicy":
        raise UsageError(f"{spec} is not an MLP over the flat observation: only those can be exported")
    layers, head = sb3_actor(model, policy_kwargs.get("activation", "tanh"))
    folder = run_directory(model)
    speed = folder / "speed.json"
    metadata: dict[str, Any] = {
        "scenario": scenario, "encoding": config.get("encoding", {}), "env_kwargs": config.get("env_kwargs", {}),
        "activation": policy_kwargs.get("activation", "tanh"),  # SB3's MlpPolicy default, and the lean PPO's
        **holding(config),  # how a league's learner holds each decision
        "run": {"directory": str(folder), "model": str(model.relative_to(folder)), "algo": config.get("algo"),
                "seed": config.get("seed"), "timesteps": timesteps(model, speed),
                "sha256": hashlib.sha256(model.read_bytes()).hexdigest(),
                "exported": datetime.now(timezone.utc).isoformat(timespec="seconds")},
    }
    policy = PretrainedPolicy(layers, head, _nvec(config, head), metadata)
    target = Path(out) if out else path_of(scenario)
    part = policy.save(target.with_name(target.name + ".part"))  # the file in place stays until this one fits
    size = part.stat().st_size
    if size > max_bytes:
        part.unlink()
        raise UsageError(f"the policy of {spec} takes {size:,} bytes, more than {max_bytes:,}: train a smaller "
                         f"policy_kwargs.net_arch")
    return part.replace(target)


def timesteps(model: Path, speed: Path) -> int | None:
    """The steps the model was trained for: a checkpoint's name says, else the run's speed.json."""
    if found := re.fullmatch(r"ppo_(\d+)_steps\.zip", model.name):
        return int(found.group(1))
    return json.loads(speed.read_text())["timesteps"] if speed.exists() else None


def _nvec(config: dict[str, Any], head: tuple[np.ndarray, np.ndarray]) -> list[int]:
    """The action components' sizes: the flat encoding's for the run's env (checked against the head)."""
    from arena_envs.sharded import make_native_env
    from arena_envs.wrappers.flatten import FlatEncoding

    envs = make_native_env(config["env_id"], 1, **config.get("env_kwargs", {}))
    nvec = [int(n) for n in FlatEncoding.for_env(envs, **config.get("encoding", {})).action_space.nvec]
    envs.close()
    if sum(nvec) != head[1].shape[0]:
        raise UsageError(f"the model's action head has {head[1].shape[0]} logits, its run's encoding {sum(nvec)}")
    return nvec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m arena_envs.training.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="an arena-train run directory, or a model zip of one")
    parser.add_argument("--out", help="the .npz to write (default: arena_envs/pretrained/<scenario>.npz)")
    parser.add_argument("--max-bytes", type=int, default=MAX_BYTES, help="refuse a bigger file (default 1 MB)")
    args = parser.parse_args(argv)
    written = export(args.run, args.out, args.max_bytes)
    print(f"wrote {written} ({written.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(run("export", main, sys.argv[1:], extra="train"))
