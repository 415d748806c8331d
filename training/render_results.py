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
  interval band, the solved level dashed;

and, from ``ladder.json`` (``arena-eval --ladder``, :mod:`arena_envs.training.ladder`), the part
between :data:`LADDER_BEGIN` and :data:`LADDER_END`: the ratings, the win/draw/loss matrix, the
win rates of the pure and mixed teams as blue against the scripted team with 95% Wilson
intervals, and ``ladder.png``.

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
LADDER_BEGIN = "<!-- ladder:begin (rendered by training/render_results.py from results/ladder.json; do not edit) -->"
LADDER_END = "<!-- ladder:end -->"
ORDER = ("foraging", "crafting", "team_capture", "team_capture_3v3")  # results.HEADLINES
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


def label(document: dict[str, Any]) -> str:
    """The headline's name on the page: its env id, and e.g. 3v3 (JSON written before labels: the env id)."""
    return document.get("label", document["env_id"])


def shipped(document: dict[str, Any]) -> str:
    pretrained = document["pretrained"]
    return f"`pretrained:{document['scenario']}` (seed {pretrained['seed']})" if pretrained else "-"


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
        lines.append(f"| {label(d)} | {metric['name']} | **{fmt(point, metric)}** [{fmt(low, metric)}, "
                     f"{fmt(high, metric)}] | {len(values)} | {target} | {scripted} | {random} "
                     f"| {shipped(d)} |")
    return lines


def solve_table(documents: list[dict[str, Any]]) -> list[str]:
    lines = ["| scenario | solved at | seeds solved | wall seconds to solve: median (range) | steps then (median) "
             "| trainer steps/s (median) | whole run, wall s (median) | load (1 min) | runs at once |",
             "|---|---|---|---|---|---|---|---|---|"]
    for d in documents:
        metric, runs = d["metric"], d["runs"]
        solved = [run["solved"] for run in runs if run["solved"]]
        seconds = [s["seconds"] for s in solved]
        timing = (f"**{np.median(seconds):.0f}** ({min(seconds):.0f}-{max(seconds):.0f})" if seconds else "not solved")
        steps = f"{np.median([s['steps'] for s in solved]):,.0f}" if solved else "-"
        timed = [run for run in runs if run["wall_seconds"] is not None]  # not a run --reuse kept with no JSON
        loads = sorted(float(run["load_after"].split()[0]) for run in timed)
        wall = f"{np.median([r['wall_seconds'] for r in timed]):.0f}" if timed else "-"
        load = f"{loads[0]:.1f}-{loads[-1]:.1f}" if timed else "-"
        at_once = max(r.get("runs_at_once", 1) for r in timed) if timed else "-"
        lines.append(f"| {label(d)} | {metric['name']} >= {fmt(metric['threshold'], metric)} | {len(solved)}/"
                     f"{len(runs)} | {timing} | {steps} | {np.median([r['steps_per_s'] for r in runs]):,.0f} "
                     f"| {wall} | {load} | {at_once} |")
    return lines


def performance_profile(documents: list[dict[str, Any]], path: Path) -> Path:
    return saved(profile_figure(documents), path)


def profile_figure(documents: list[dict[str, Any]], reps: int = REPS):
    """The performance profiles' figure: per scenario, the share of runs whose normalised score
    exceeds each tau, with its bootstrap band (``reps`` resamples)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rliable import library, plot_utils

    scores = {label(d): normalised(d).reshape(-1, 1) for d in documents}
    top = max(2.0, max(float(s.max()) for s in scores.values()) * 1.05)
    taus = np.linspace(0.0, top, 101)
    profiles, intervals = library.create_performance_profile(scores, taus, reps=reps)
    fig, ax = plt.subplots(figsize=(6, 4))
    colours = dict(zip(scores, ("tab:blue", "tab:orange", "tab:green", "tab:red"), strict=False))
    plot_utils.plot_performance_profiles(profiles, taus, performance_profile_cis=intervals, colors=colours,
                                         xlabel=r"normalised score $\tau$ (metric / solved level)",
                                         ylabel=r"fraction of runs with score $> \tau$", ax=ax, legend=True)
    ax.axvline(1.0, ls="--", color="grey")
    return fig


def saved(fig, path: Path) -> Path:
    """Write ``fig`` to ``path`` and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def learning_curves(documents: list[dict[str, Any]], path: Path, points: int = 25) -> Path:
    return saved(curves_figure(documents, points), path)


def curves_figure(documents: list[dict[str, Any]], points: int = 25, reps: int = 500):
    """The learning curves' figure: a panel per scenario, its metric over training steps (the IQM
    across seeds at ``points`` steps, each seed's curve interpolated there) with the 95% band
    (``reps`` resamples at each)."""
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
            estimates = np.array([iqm_interval(values[:, i], reps=reps) for i in range(len(grid))])
            ax.plot(grid, estimates[:, 0], label=f"IQM of {len(curves)} seeds")
            ax.fill_between(grid, estimates[:, 1], estimates[:, 2], alpha=0.3, label="95% CI")
            ax.set_ylabel(metric["name"])
            ax.set_title(f"{label(d)} ({curves[0]['column']})")
        else:
            ax.text(0.5, 0.5, "no point logged", ha="center", transform=ax.transAxes)
        ax.axhline(metric["threshold"], ls="--", color="grey", label="solved")
        ax.set_xlabel("env steps (agent steps in team capture)")
        if not curves:
            ax.set_title(label(d))
        ax.grid(alpha=0.3)
        ax.legend(loc="best")
    return fig


# -- the ladder (training/ladder.py writes ladder.json; arena-eval --ladder draws these too) ------------


def ladder_tables(document: dict[str, Any]) -> list[str]:
    """The ladder's tables: ratings, the win/draw/loss matrix, the win rates against the scripted team."""
    names = [row["entrant"] for row in document["ratings"]]
    lines = ["| rank | team | ordinal | mu | sigma | games |", "|---|---|---|---|---|---|"]
    for rank, row in enumerate(document["ratings"], 1):
        games = sum(sum(cell) for cell in document["matrix"][row["entrant"]].values())
        lines.append(f"| {rank} | `{row['entrant']}` | {row['ordinal']:.2f} | {row['mu']:.2f} | "
                     f"{row['sigma']:.2f} | {games} |")
    lines += ["", "Wins/draws/losses of the row's team against the column's:", "",
              "| | " + " | ".join(f"`{n}`" for n in names) + " |", "|---" * (len(names) + 1) + "|"]
    for a in names:
        cells = ["-" if a == b else "/".join(map(str, document["matrix"][a][b])) if b in document["matrix"][a]
                 else "" for b in names]
        lines.append(f"| `{a}` | " + " | ".join(cells) + " |")
    if document["against_scripted"]:
        lines += ["", "As blue against the scripted team (red), 95% Wilson intervals:", "",
                  "| blue team | games | wins | draws | win rate | 95% interval |", "|---|---|---|---|---|---|"]
        for row in document["against_scripted"]:
            low, high = row["interval"]
            lines.append(f"| `{row['team']}` | {row['games']} | {row['wins']} | {row['draws']} | "
                         f"{100 * row['win_rate']:.1f}% | [{100 * low:.1f}%, {100 * high:.1f}%] |")
    return lines


def ladder_plot(document: dict[str, Any], path: Path) -> Path:
    """Two panels: each team's mu with +-3 sigma (its ordinal the lower end), and the row team's
    win rate against the column team's (a draw counts half)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = document["ratings"]
    names = [row["entrant"] for row in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.5 * len(names) + 3),
                                      gridspec_kw={"width_ratios": [1, 1.2]})
    y = np.arange(len(names))[::-1]
    mu, sigma = np.array([r["mu"] for r in rows]), np.array([r["sigma"] for r in rows])
    left.errorbar(mu, y, xerr=3 * sigma, fmt="o", capsize=4)
    left.set_yticks(y, names)
    left.set_xlabel("openskill mu (bars: +-3 sigma; the left end is the ordinal)")
    left.grid(alpha=0.3)
    score = np.full((len(names), len(names)), np.nan)
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if b in document["matrix"][a]:
                wins, draws, losses = document["matrix"][a][b]
                score[i, j] = (wins + 0.5 * draws) / max(wins + draws + losses, 1)
    image = right.imshow(score, vmin=0, vmax=1, cmap="RdBu")
    right.set_xticks(range(len(names)), names, rotation=45, ha="right")
    right.set_yticks(range(len(names)), names)
    for i in range(len(names)):
        for j in range(len(names)):
            if not np.isnan(score[i, j]):
                right.text(j, i, f"{score[i, j]:.2f}", ha="center", va="center", fontsize=8)
    fig.colorbar(image, ax=right, label="row's score against column (win 1, draw 0.5)")
    fig.suptitle(f"Team Capture ladder: {document['games']} games a pair"
                 + (f", {document['llm_games']} with an LLM seat" if document["llm_pairs"] else ""))
    return saved(fig, path)


def render(folder: Path, page: Path, figures: Path | None = None) -> str:
    """Write the plots and replace the generated parts of ``page`` (the scenarios', the ladder's);
    returns them."""
    files = [folder / f"{name}.json" for name in ORDER]
    documents = [json.loads(file.read_text()) for file in files if file.exists()]
    ladder = json.loads((folder / "ladder.json").read_text()) if (folder / "ladder.json").exists() else None
    if not documents and ladder is None:
        raise SystemExit(f"render_results: no results JSON in {folder} (make results writes it)")
    figures = figures or folder
    figures.mkdir(parents=True, exist_ok=True)
    text = page.read_text() if page.exists() else ""
    parts = []
    if documents:
        parts.append(scenario_section(documents, files, figures, page))
        text = replaced(text, BEGIN, END, parts[-1])
    if ladder is not None:
        parts.append(ladder_section(ladder, ladder_plot(ladder, figures / "ladder.png"), page))
        text = replaced(text, LADDER_BEGIN, LADDER_END, parts[-1])
    page.write_text(text)
    return "\n".join(parts)


def replaced(text: str, begin: str, end: str, generated: str) -> str:
    """``text`` with the part from ``begin`` to ``end`` replaced by ``generated`` (appended when absent)."""
    if begin in text and end in text:
        return text[:text.index(begin)] + generated + text[text.index(end) + len(end):]
    return text.rstrip("\n") + "\n\n" + generated + "\n" if text else generated + "\n"


def relative_to_page(path: Path, page: Path) -> Path:
    path, folder = path.resolve(), page.parent.resolve()
    return path.relative_to(folder) if path.is_relative_to(folder) else path


def ladder_section(ladder: dict[str, Any], plot: Path, page: Path) -> str:
    llm = ladder["llm"]
    games = ladder["llm_games"]
    chat = (f" A game with an LLM seat goes through the chat path (`TeamChat`): {games} game{'s' * (games != 1)} a pair"
            f"{' (half on each side)' if games > 1 else ' (the first team of the pair as blue)'}"
            f", each LLM seat giving {llm['turns']} repl{'y' if llm['turns'] == 1 else 'ies'} a "
            f"game ({llm['format']} calls, at most {llm['max_tokens']} tokens, up to {llm['wait_ticks']} ticks walked "
            f"after each), then carrying on with its last action to the end; {llm['requests']} model requests, "
            f"{llm['failed_requests']} failed." if llm else "")
    seats = "; ".join(f"`{name}` = {' + '.join(f'`{s}`' for s in team)}" for name, team in ladder["entrants"].items()
                      if len(set(team)) > 1 or name != team[0])
    lines = [LADDER_BEGIN, "",
             f"Team Capture ({', '.join(f'{k}={v}' for k, v in ladder['env_kwargs'].items())}), every pair of teams "
             f"{ladder['games']} games on held-out worlds (seeds {ladder['seeds'][0]}-{ladder['seeds'][1]}), half with "
             f"each team as blue.{chat} Ratings: openskill's Plackett-Luce, ordinal = mu - 3 sigma. "
             f"Written {ladder['created']} in {ladder['wall_seconds']:.0f} s (load {ladder['load']['before'][0]} "
             f"before, {ladder['load']['after'][0]} after).", "",
             *([f"Teams by seat (agent 1 + agent 2): {seats}.", ""] if seats else []),
             *ladder_tables(ladder), "",
             f"![The ladder: each team's openskill rating, and each team's score against each other]"
             f"({relative_to_page(plot, page)})", "", LADDER_END]
    return "\n".join(lines)


def scenario_section(documents: list[dict[str, Any]], files: list[Path], figures: Path, page: Path) -> str:
    profile = performance_profile(documents, figures / "performance_profile.png")
    curves = learning_curves(documents, figures / "learning_curves.png")
    relative = [relative_to_page(p, page) for p in (profile, curves)]
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
               "**Time to solve**: training wall seconds until the metric, as the run logged it (its periodic "
               "evaluation on held-out worlds), first reached the solved level. The whole run's wall time and the "
               "load (1 min) as it ended are those of the runs `make results` trained (a run kept by `--reuse` "
               "keeps its JSON's, and shows none without one).", "",
               *solve_table(documents), "",
               f"![Performance profiles: for each scenario, the fraction of runs whose score over its solved level "
               f"exceeds tau]({relative[0]})", "",
               f"![Learning curves: each scenario's metric over training, IQM across seeds with a 95% interval band]"
               f"({relative[1]})", "", END]
    return "\n".join(section)


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
