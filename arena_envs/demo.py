"""``make demo``: PPO learns Foraging-v0 in under a minute, then meets the random agent and the scripted forager.

1. ``arena-train Foraging-v0`` (the lean PPO of ``training/ppo.py``, its config's 491,520
   steps) on the native batch for at most ``--minutes`` of wall time (``runs/demo/ppo/``:
   model, checkpoints, CSV and TensorBoard logs);
2. ``arena-eval`` on 200 held-out seeded worlds, the policy's actions sampled as in
   training: the table (``eval.md``), the learning curve (``learning_curve.png``) and one
   recorded episode (``rollout.gif``, ``rollout.jsonl``);
3. the ``arena-bench`` table (``runs/demo/bench.md``).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from arena_envs import bench

ENV_ID = "arena_envs/Foraging-v0"


def main(argv: list[str] | None = None) -> None:
    from arena_envs.training.evaluate import evaluate
    from arena_envs.training.train import train

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="training wall-time cap (default 5)")
    parser.add_argument("--timesteps", type=int, default=None, help="default: the config's")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bench-seconds", type=float, default=0.5)
    parser.add_argument("--bench-only", nargs="*", default=[], help="arena-bench sections (default all)")
    parser.add_argument("--out", default="runs/demo")
    args = parser.parse_args(argv)
    out = Path(args.out)
    shutil.rmtree(out / "ppo", ignore_errors=True)  # a fresh run each time

    print(f"== training PPO on {ENV_ID} (at most {args.minutes:g} min)", flush=True)
    steps = [] if args.timesteps is None else ["--timesteps", str(args.timesteps)]
    run = train([ENV_ID, *steps, "--seed", str(args.seed), "--out", str(out / "ppo"),
                 "--max-minutes", str(args.minutes)])
    print("\n== evaluating against the random agent and the scripted forager", flush=True)
    evaluate([str(run), ENV_ID, "--episodes", str(args.episodes), "--rollout", "--stochastic"])
    print("\n== arena-bench", flush=True)
    only = ["--only", *args.bench_only] if args.bench_only else []
    rows = bench.run(["--seconds", str(args.bench_seconds), "--json", str(out / "bench.json"), *only])
    (out / "bench.md").write_text(bench.format_table(rows) + "\n")
    print(f"\nwrote {run}/eval.md, learning_curve.png, rollout.gif, rollout.jsonl and {out}/bench.md")


if __name__ == "__main__":
    main()
