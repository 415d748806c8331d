"""Render ``docs/results.md``'s tables and plots from the JSON ``make results`` wrote (never typed).

    .venv-stats/bin/python training/render_results.py docs/results --page docs/results.md

Reads every ``<scenario>.json`` of the folder (:mod:`arena_envs.training.results`), and
replaces the part of ``--page`` between the markers :data:`BEGIN` and :data:`END` (the rest
of the page is left alone) with:

- the headline table: per scenario, the IQM over the training seeds of its metric with a 95%
  stratified bootstrap interval (``rliable``), the target, the baselines and the shipped policy;
- the time-to-solve table: wall seconds of training until the metric first reached its solved
  level (median and range over the seeds that got there), the steps then, the trainer's steps/s
  and the machine's load;
- ``performance_profile.png``: per scenario, the share of runs whose normalised score (the
  metric over its solved level: 1 is solved) exceeds each value, with bootstrap bands;
- ``learning_curves.png``: the metric over training steps, the IQM across seeds with its 95%
  interval band, the solved level dashed.

It imports only numpy, matplotlib and rliable, so that it runs in the small venv of its own
that ``make results`` makes (``.venv-stats``): rliable 1.2 needs ``arch<8``, and arch 7 does
not import beside pandas 3, which the project's venv has.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

BEGIN = "<!-- results:begin (rendered by training/render_results.py from docs/results/*.json; do not edit) -->"
END = "<!-- results:end -->"
ORDER = ("foraging", "crafting", "team_capture")
REPS = 2000  # bootstrap resamples (rliable's examples use 2000 for intervals)
# rliable 1.2 hands arch a RandomState, which arch 7 still takes with a FutureWarning per interval
warnings.filterwarnings("ignore", "random_state is deprecated", FutureWarning)


def iqm_interval(values: np.ndarray, reps: int = REPS, seed: int = 0) -> tuple[float, float, float]:
    """The IQM of ``values`` (runs,) and its 95% stratified bootstrap interval, from rliable."""
    from rliable import library, metrics

    # arch 7 draws some of its resamples from numpy's global generator besides the RandomState it is
    # handed (two renders of the same JSON gave [23.3%, 93.3%] and [23.3%, 91.7%]): seed both
    np.random.seed(seed)
    point, interval = library.get_interval_estimates(
        {"x": np.asarray(values, float).reshape(-1, 1)}, lambda x: np.array([metrics.aggregate_iqm(x)]),
        reps=reps, random_state=np.random.RandomState(seed))
    return float(point["x"][0]), float(interval["x"][0, 0]), float(interval["x"][1, 0])


def normalised(document: dict[str, Any]) -> np.ndarray:
    """Each run's metric over the scenario's solved level (1: solved)."""
    level = document["metric"]["threshold"] or 1.0
    return np.array([run["value"] for run in document["runs"]]) / level


def fmt(value: float, metric: dict[str, Any]) -> str:
    return f"{100 * value:.1f}%" if metric["final"] == "success" else f"{value:.1f}"


def headline_table(documents: list[dict[str, Any]]) -> list[str]:
    lines = ["| scenario | metric (held-out worlds) | IQM over seeds [95% CI] | seeds | target | scripted | random "
             "| shipped policy |", "|---|---|---|---|---|---|---|---|"]
    for d in documents:
        metric = d["metric"]
        values = np.array([run["value"] for run in d["runs"]])
        point, low, high = iqm_interval(values)
        key = f"{metric['final']}_mean"
        target = (fmt(metric["target"], metric) if metric["target"] is not None
                  else f">= scripted ({fmt(d['baselines']['scripted'][key], metric)})")
        scripted, random = (fmt(d["baselines"][name][key], metric) for name in ("scripted", "random"))
        lines.append(f"| {d['env_id']} | {metric['name']} | **{fmt(point, metric)}** [{fmt(low, metric)}, "
                     f"{fmt(high, metric)}] | {len(values)} | {target} | {scripted} | {random} "
                     f"| `pretrained:{d['scenario']}` (seed {d['pretrained']['seed']}) |")
    return lines


def solve_table(documents: list[dict[str, Any]]) -> list[str]:
    lines = ["| scenario | solved at | seeds solved | wall seconds to solve: median (range) | steps then (median) "
             "| trainer steps/s (median) | whole run, wall s (median) | load (1 min) |",
             "|---|---|---|---|---|---|---|---|"]
    for d in documents:
        metric, runs = d["metric"], d["runs"]
        solved = [run["solved"] for run in runs if run["solved"]]
        seconds = [s["seconds"] for s in solved]
        timing = (f"**{np.median(seconds):.0f}** ({min(seconds):.0f}-{max(seconds):.0f})" if seconds else "not solved")
        steps = f"{np.median([s['steps'] for s in solved]):,.0f}" if solved else "-"
        loads = sorted(float(run["load_after"].split()[0]) for run in runs)
        lines.append(f"| {d['env_id']} | {metric['name']} >= {fmt(metric['threshold'], metric)} | {len(solved)}/"
                     f"{len(runs)} | {timing} | {steps} | {np.median([r['steps_per_s'] for r in runs]):,.0f} "
                     f"| {np.median([r['wall_seconds'] for r in runs]):.0f} | {loads[0]:.1f}-{loads[-1]:.1f} |")
    return lines


def performance_profile(documents: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rliable import library, plot_utils

    scores = {d["env_id"]: normalised(d).reshape(-1, 1) for d in documents}
    top = max(2.0, max(float(s.max()) for s in scores.values()) * 1.05)
    taus = np.linspace(0.0, top, 101)
    profiles, intervals = library.create_performance_profile(scores, taus, reps=REPS)
    fig, ax = plt.subplots(figsize=(6, 4))
    colours = dict(zip(scores, ("tab:blue", "tab:orange", "tab:green"), strict=False))
    plot_utils.plot_performance_profiles(profiles, taus, performance_profile_cis=intervals, colors=colours,
                                         xlabel=r"normalised score $\tau$ (metric / solved level)",
                                         ylabel=r"fraction of runs with score $> \tau$", ax=ax, legend=True)
    ax.axvline(1.0, ls="--", color="grey")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def learning_curves(documents: list[dict[str, Any]], path: Path, points: int = 25) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(documents), figsize=(5 * len(documents), 3.8), squeeze=False)
    for ax, d in zip(axes[0], documents, strict=True):
        metric, curves = d["metric"], [run["curve"] for run in d["runs"] if run["curve"]["steps"]]
        if curves:
            end = min(c["steps"][-1] for c in curves)
            start = max(c["steps"][0] for c in curves)
            grid = np.linspace(start, end, points) if end > start else np.array([end])
            values = np.stack([np.interp(grid, c["steps"], c["value"]) for c in curves])  # (seeds, points)
            estimates = np.array([iqm_interval(values[:, i], reps=500) for i in range(len(grid))])
            ax.plot(grid, estimates[:, 0], label=f"IQM of {len(curves)} seeds")
            ax.fill_between(grid, estimates[:, 1], estimates[:, 2], alpha=0.3, label="95% CI")
            ax.set_ylabel(metric["name"])
            ax.set_title(f"{d['env_id']} ({curves[0]['column']})")
        else:
            ax.text(0.5, 0.5, "no point logged", ha="center", transform=ax.transAxes)
        ax.axhline(metric["threshold"], ls="--", color="grey", label="solved")
        ax.set_xlabel("env steps (agent steps in team capture)")
        if not curves:
            ax.set_title(d["env_id"])
        ax.grid(alpha=0.3)
        ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def render(folder: Path, page: Path, figures: Path | None = None) -> str:
    """Write the plots and replace the generated part of ``page``; returns that part."""
    files = [folder / f"{name}.json" for name in ORDER]
    documents = [json.loads(file.read_text()) for file in files if file.exists()]
    if not documents:
        raise SystemExit(f"render_results: no results JSON in {folder} (make results writes it)")
    figures = figures or folder
    figures.mkdir(parents=True, exist_ok=True)
    profile = performance_profile(documents, figures / "performance_profile.png")
    curves = learning_curves(documents, figures / "learning_curves.png")
    relative = [Path(p).resolve().relative_to(page.parent.resolve()) if p.resolve().is_relative_to(
        page.parent.resolve()) else p.resolve() for p in (profile, curves)]
    short = any(d["short"] for d in documents)
    missing = [name for name, file in zip(ORDER, files, strict=True) if not file.exists()]
    seeds = sorted({len(d["runs"]) for d in documents})
    section = [BEGIN, "",
               *(["**A short run (CI): a few updates per seed, not a result.**", ""] if short else []),
               f"Each scenario's headline config trained with {'/'.join(map(str, seeds))} seeds "
               f"(`arena-train <scenario> --seed S`), its final policy evaluated with sampled actions on "
               f"{documents[0]['episodes']} held-out worlds (seeds {documents[0]['eval_seeds'][0]}-"
               f"{documents[0]['eval_seeds'][1]}; team capture: as blue against the scripted team). The interval "
               f"is rliable's 95% stratified bootstrap of the IQM over seeds. Written {documents[0]['created']} "
               f"on this 2-core machine, shared: the load is given beside each wall-clock figure.", "",
               *headline_table(documents), "",
               *([f"Not run yet (no JSON): {', '.join(missing)}; `make results` runs every scenario.", ""]
                 if missing else []),
               "**Time to solve**: training wall seconds until the metric, as the run logged it (the "
               "training episodes' mean, or its periodic evaluation), first reached the solved level.", "",
               *solve_table(documents), "",
               f"![Performance profiles: for each scenario, the fraction of runs whose score over its solved level "
               f"exceeds tau]({relative[0]})", "",
               f"![Learning curves: each scenario's metric over training, IQM across seeds with a 95% interval band]"
               f"({relative[1]})", "", END]
    text = page.read_text() if page.exists() else ""
    generated = "\n".join(section)
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + generated + text[text.index(END) + len(END):]
    else:
        text = generated + "\n" + text
    page.write_text(text)
    return generated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="render_results.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="the JSON of make results (docs/results)")
    parser.add_argument("--page", default="docs/results.md", help="the page whose generated part is replaced")
    parser.add_argument("--figures", help="where the plots go (default: the JSON's folder)")
    args = parser.parse_args(argv)
    render(Path(args.folder), Path(args.page), Path(args.figures) if args.figures else None)
    print(f"rendered {args.page} from {args.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
