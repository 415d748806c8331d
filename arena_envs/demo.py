"""``make demo``: in about a minute, PPO learns Foraging-v0 and a shipped team plays a capture match.

1. ``arena-train Foraging-v0``: the lean PPO of ``training/ppo.py`` for its config's steps
   (1M, the update in a learner process beside the rollouts: 5 seeds scored 97.4-98.7 on
   held-out worlds against the scripted forager's 95.7), on the native batch, for at most
   ``--minutes`` of wall time (``runs/demo/ppo/``: model, checkpoints, CSV and TensorBoard
   logs). (With the config before, the update in-process: 393,216 steps beat the scripted
   forager on held-out worlds, 96.6-97.7 over seeds 0-2, but the training curve, a mean over
   the last 100 episodes, still stood near 60; 491,520 steps ended it at 99-100.)
2. ``arena-eval`` on ``--episodes`` held-out seeded worlds, the policy's actions sampled as in
   training, beside the random agent and the scripted forager: the table (``eval.md``) and
   the learning curve with both as dashed lines (``learning_curve.png``).
3. One Team Capture match of the shipped policy (``pretrained``, blue) against the scripted
   team (red), in held-out world ``--match-seed`` (``runs/demo/team_capture/``): its GIF
   (``match.gif``), its recording for ``arena-view`` (``episodes.jsonl``) and the replay page
   exported from it (``site/index.html``, opens from disk).

The full ``arena-bench`` table is ``make bench``.
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from arena_envs import pretrained
from arena_envs.names import resolve

FORAGING = resolve("Foraging-v0").env_id
TEAM_CAPTURE = resolve("TeamCapture-v0").env_id
MATCH = "pretrained vs scripted"  # the recorded episode's label (the replay page's agent column)


def team_capture_match(out: Path, seed: int) -> tuple[Path, Path]:
    """The shipped Team Capture policy (blue) against the scripted team (red) in world ``seed``:
    ``out/match.gif`` and the replay page ``out/site/index.html``; returns both paths.

    The GIF is drawn by ``arena-eval``'s rollout and the recording made by its episode loop:
    the same agents, seeded alike, in the same world, so the same match (the tests check it)."""
    from arena_envs.training.common import agent_factory, play
    from arena_envs.training.evaluate import record_rollout
    from arena_envs.viewer.cli import export
    from arena_envs.viewer.episodes import Episodes

    out.mkdir(parents=True, exist_ok=True)
    env_kwargs = pretrained.load("pretrained", TEAM_CAPTURE).env_kwargs  # the team size it was trained for
    blue, red = agent_factory("pretrained", TEAM_CAPTURE, seed), agent_factory("scripted", TEAM_CAPTURE, seed)
    gif, _ = record_rollout(blue, TEAM_CAPTURE, seed, out, env_kwargs, red, name="match")
    play(blue, TEAM_CAPTURE, 1, seed, env_kwargs, red, record=out, label=MATCH)
    return gif, export(Episodes.load([out]), out / "site")


@contextmanager
def phase(seconds: dict[str, float], name: str, heading: str) -> Iterator[None]:
    """A part of the demo: its heading printed, its wall time kept in ``seconds[name]``."""
    print(f"\n== {heading}", flush=True)
    started = time.monotonic()
    yield
    seconds[name] = time.monotonic() - started


def main(argv: list[str] | None = None) -> None:
    from arena_envs.training.evaluate import evaluate
    from arena_envs.training.train import train

    parser = argparse.ArgumentParser(prog="python -m arena_envs.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="training wall-time cap (default 5)")
    parser.add_argument("--timesteps", type=int, default=None, help="training steps (default: the config's)")
    parser.add_argument("--episodes", type=int, default=200, help="held-out worlds per agent (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="training seed (default 0)")
    parser.add_argument("--match-seed", type=int, default=10_000, help="the match's world (default 10000)")
    parser.add_argument("--out", default="runs/demo")
    args = parser.parse_args(argv)
    out = Path(args.out)
    run, match = out / "ppo", out / "team_capture"
    for folder in (run, match):  # a fresh run each time (a recording is appended to)
        shutil.rmtree(folder, ignore_errors=True)
    seconds: dict[str, float] = {}

    with phase(seconds, "training", f"training PPO on {FORAGING} (at most {args.minutes:g} min)"):
        steps = [] if args.timesteps is None else ["--timesteps", str(args.timesteps)]
        train([FORAGING, *steps, "--seed", str(args.seed), "--out", str(run), "--max-minutes", str(args.minutes)])
    with phase(seconds, "evaluation", "evaluating it against the random agent and the scripted forager"):
        evaluate([str(run), FORAGING, "--episodes", str(args.episodes), "--stochastic"])
    with phase(seconds, "match", "a Team Capture match: the shipped policy (blue) against the scripted team (red)"):
        gif, page = team_capture_match(match, args.match_seed)

    look = {str(run / "eval.md"): "PPO against the random agent and the scripted forager",
            str(run / "learning_curve.png"): "its learning curve, the baselines as dashed lines",
            str(gif): "the shipped team (blue) against the scripted team (red)",
            str(page): "the match's replay page, opened from disk",
            f"arena-view {match}": "the same page served: scrub, zoom, every agent's calls"}
    width = max(map(len, look))
    print(f"\ndone in {sum(seconds.values()):.0f} s ({', '.join(f'{k} {v:.0f} s' for k, v in seconds.items())}). "
          "Look at:\n" + "\n".join(f"  {where:<{width}}   {what}" for where, what in look.items()))


if __name__ == "__main__":
    main()
