"""The before/after table and the reward curve of the LLM training guide.

    python docs/llm_training_figures.py --eval base=runs/eval_base.json sft=runs/eval_sft.json \\
        grpo=runs/eval_grpo.json --run runs/grpo --last-step 10 --plot docs/images/llm_grpo_curve.png

Prints one Markdown row per evaluation (``python -m arena_envs.training.llm_eval ... --json``): success,
mean return, readable-call rate and turns, each with its 95% interval; for an evaluation made with
``--baseline``, a line with its seed-by-seed difference from that baseline; and plots the GRPO run's
reward, success and readable-call rate per step (``progress.csv``), with the step count and wall time.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

COLUMNS = (("success", "success"), ("return", "mean return"), ("readable_call_rate", "readable-call rate"),
           ("turns", "turns"))


def table(evaluations: dict[str, dict]) -> str:
    lines = ["| model | episodes | " + " | ".join(title for _, title in COLUMNS) + " |",
             "|---|---:|" + "---:|" * len(COLUMNS)]
    for name, summary in evaluations.items():
        cells = [f"{summary[key][0]:.3f} [{summary[key][1]:.3f}, {summary[key][2]:.3f}]" for key, _ in COLUMNS]
        lines.append(f"| {name} | {summary['episodes']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def differences(evaluations: dict[str, dict]) -> list[str]:
    """One line per evaluation compared with a baseline (``llm_eval --baseline``): the paired differences."""
    lines = []
    for name, summary in evaluations.items():
        if "versus" in summary:
            versus = summary["versus"]
            cells = [f"{key} {versus[key][0]:+.3f} [{versus[key][1]:+.3f}, {versus[key][2]:+.3f}]"
                     for key in ("success", "return")]
            lines.append(f"{name} minus {versus['baseline']}, seed by seed: " + ", ".join(cells))
    return lines


def curve(run: Path, out: Path, last_step: int | None = None) -> str:
    """Plot the run's per-step metrics (up to ``last_step``: the checkpoint evaluated); returns a line with
    its steps and wall time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with (run / "progress.csv").open() as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("arena/reward")
                and (last_step is None or int(row["step"]) <= last_step)]
    steps = [int(row["step"]) for row in rows]
    seconds = sum(float(row.get("step_time") or 0) for row in rows)
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    axes[0].plot(steps, [float(row["arena/reward"]) for row in rows], label="reward (return - penalties)")
    axes[0].plot(steps, [float(row["arena/return"]) for row in rows], label="environment return")
    axes[0].set_xlabel("GRPO step")
    axes[0].legend()
    for key, label in (("arena/success", "success"), ("arena/readable_call_rate", "readable-call rate"),
                       ("arena/zero_spread_groups", "zero-spread groups")):
        axes[1].plot(steps, [float(row[key]) for row in rows], label=label)
    axes[1].set_xlabel("GRPO step")
    axes[1].set_ylim(-0.05, 1.05)
    axes[1].legend()
    summary = f"{len(steps)} step{'s' * (len(steps) != 1)}, {seconds / 60:.1f} min of step time"
    figure.suptitle(f"GRPO, {summary}")
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=100)
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval", nargs="+", default=[], metavar="NAME=JSON", help="llm_eval summaries, in order")
    parser.add_argument("--run", type=Path, help="the GRPO run directory")
    parser.add_argument("--plot", type=Path, help="where the curve goes (PNG)")
    parser.add_argument("--last-step", type=int, help="plot the steps up to this one (the checkpoint evaluated)")
    args = parser.parse_args(argv)
    evaluations = {}
    for item in args.eval:
        name, _, path = item.partition("=")
        evaluations[name] = json.loads(Path(path).read_text())
    if evaluations:
        print(table(evaluations))
        print("\n".join(differences(evaluations)))
    if args.run is not None and args.plot is not None:
        print(f"{args.plot}: {curve(args.run, args.plot, args.last_step)}")


if __name__ == "__main__":
    main()
