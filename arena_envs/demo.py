"""``make demo``: the scripted forager and a random agent on Foraging-v0, then the bench.

Each policy plays the same seeded episodes (one per world of a native batch); the
scores table and the bench table are printed and written under ``runs/demo/``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import gymnasium as gym
import numpy as np

import arena_envs  # noqa: F401
from arena_envs import bench
from arena_envs.scripted import ScriptedForager

ENV_ID = "arena_envs/Foraging-v0"


def play(policy, episodes: int, seed: int, **env_kwargs) -> dict[str, np.ndarray]:
    """Play one episode in each of ``episodes`` worlds seeded seed, seed+1, ...; per-episode results."""
    envs = gym.make_vec(ENV_ID, num_envs=episodes, **env_kwargs)
    obs, _ = envs.reset(seed=seed)
    ret = np.zeros(episodes)
    length = np.zeros(episodes, int)
    result: dict[str, np.ndarray] = {}
    running = np.ones(episodes, bool)
    while running.any():
        obs, reward, terminated, truncated, info = envs.step(policy(obs, envs))
        ret += reward * running
        length += running
        done = running & (terminated | truncated)
        for key in ("score", "resources_collected", "damage_taken"):
            result.setdefault(key, np.zeros(episodes))[done] = info[key][done]
        running &= ~done
    envs.close()
    return {"return": ret, "length": length, **result}


def summary(name: str, r: dict[str, np.ndarray]) -> str:
    return (f"| {name:<16} | {r['return'].mean():6.2f} ± {r['return'].std():5.2f} | "
            f"{r['score'].mean():6.1f} ± {r['score'].std():5.1f} | {r['resources_collected'].mean():5.2f} | "
            f"{r['damage_taken'].mean():6.1f} | {r['length'].mean():6.1f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bench-seconds", type=float, default=1.0)
    parser.add_argument("--out", default="runs/demo")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    forager = ScriptedForager()
    rng = np.random.default_rng(args.seed)

    def random_policy(obs, envs):
        envs.action_space.seed(int(rng.integers(2**31)))
        return envs.action_space.sample()

    seeds = f"seeds {args.seed}..{args.seed + args.episodes - 1}"
    lines = [f"Foraging-v0, {args.episodes} seeded episodes per row ({seeds})",
             "", "| agent            | return          | score           | res.  | damage | length |",
             "|------------------|-----------------|-----------------|-------|--------|--------|"]
    results = {}
    for layout in ("random", "classic"):
        for name, policy in (("scripted", lambda obs, envs: forager.act(obs)), ("random", random_policy)):
            r = play(policy, args.episodes, args.seed, layout=layout)
            results[f"{layout}/{name}"] = {k: float(v.mean()) for k, v in r.items()}
            lines.append(summary(f"{layout}/{name}", r))
    table = "\n".join(lines)
    print(table, "\n", flush=True)
    rows = bench.main(["--seconds", str(args.bench_seconds), "--json", str(out / "bench.json")])
    (out / "scores.md").write_text(table + "\n\n" + bench.format_table(rows) + "\n")
    (out / "scores.json").write_text(json.dumps(results, indent=2))
    print(f"\nwrote {out / 'scores.md'}, {out / 'scores.json'}, {out / 'bench.json'}")


if __name__ == "__main__":
    main()
