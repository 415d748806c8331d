"""``make results``: the headline runs to JSON (training/results.py) and the page rendered from it
(training/render_results.py, in the stats venv ``make`` builds), in short and from made-up JSON."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from arena_envs import pretrained
from arena_envs.training import results
from arena_envs.training.common import agent_factory, play

ROOT = Path(__file__).resolve().parents[1]
STATS_PYTHON = ROOT / ".venv-stats" / "bin" / "python"
RENDER = ROOT / "training" / "render_results.py"


def render(folder: Path, page: Path) -> subprocess.CompletedProcess:
    assert STATS_PYTHON.exists(), "the stats venv is missing: make stats (make test builds it)"
    return subprocess.run([str(STATS_PYTHON), str(RENDER), str(folder), "--page", str(page)], capture_output=True,
                          text=True, timeout=300)


def made_up(scenario: str, values: list[float], solved: list[float | None], threshold: float) -> dict:
    """A results document as training/results.py writes it, with chosen numbers."""
    runs = [{"seed": i, "run": f"runs/{scenario}/seed{i}", "value": v, "final": {"score_mean": v, "success_mean": v},
             "curve": {"column": "eval/success_rate", "seconds": [1.0, 2.0, 3.0], "steps": [100.0, 200.0, 300.0],
                       "value": [0.0, v / 2, v]},
             "solved": None if s is None else {"seconds": s, "steps": 10 * s}, "losses": {},
             "steps": 300, "train_seconds": 3.0, "wall_seconds": 9.0 + i, "steps_per_s": 1000.0 * (i + 1),
             "load_before": "1.0 1.0 1.0", "load_after": f"{1.0 + i} 1.0 1.0"}
            for i, (v, s) in enumerate(zip(values, solved, strict=True))]
    return {"scenario": scenario, "env_id": {"crafting": "Crafting-v0"}.get(scenario, "TeamCapture-v0"),
            "short": False, "metric": {"name": "win rate", "final": "success", "columns": ["eval/success_rate"],
                                       "target": 0.6, "solved_share": 0.0, "solved_absolute": threshold,
                                       "threshold": threshold},
            "episodes": 200, "seeds": list(range(len(values))), "eval_seeds": [10000, 10199], "env_kwargs": {},
            "baselines": {"random": {"success_mean": 0.0}, "scripted": {"success_mean": 0.02}},
            "runs": runs, "pretrained": {"file": "x.npz", "run": runs[0]["run"], "seed": 0},
            "created": "2026-11-27T09:00:00+00:00"}


def test_the_page_is_rendered_from_the_json_and_only_between_its_markers(tmp_path):
    values = [0.1, 0.5, 0.6, 0.9, 0.95]  # IQM 0.667, median 0.6, mean 0.61: only the IQM passes
    (tmp_path / "team_capture.json").write_text(json.dumps(made_up("team_capture", values,
                                                                   [None, 40.0, 30.0, 50.0, 10.0], 0.5)))
    page = tmp_path / "results.md"
    page.write_text(f"# Results\n\nkept above\n\n{results_markers()}\n\nkept below\n")
    done = render(tmp_path, page)
    assert done.returncode == 0, done.stderr[-3000:]
    text = page.read_text()
    assert text.startswith("# Results\n\nkept above\n\n") and text.endswith("\n\nkept below\n")
    row = next(line for line in text.splitlines() if line.startswith("| TeamCapture-v0 | win rate |"))
    # the IQM: the mean of the runs left when the lowest and highest quarter are cut, inside its interval
    from scipy.stats import trim_mean

    middle = trim_mean(values, 0.25)
    point, low, high = (float(x) / 100 for x in re.search(r"\*\*([\d.]+)%\*\* \[([\d.]+)%, ([\d.]+)%\]", row).groups())
    assert point == pytest.approx(middle, abs=5e-4) and low < point < high
    assert low >= min(values) and high <= max(values)
    solve = next(line for line in text.splitlines() if line.startswith("| TeamCapture-v0 | win rate >= 50.0%"))
    assert "| 4/5 | **35** (10-50) | 350 | 3,000 | 11 | 1.0-5.0 |" in solve  # medians of the seeds that solved
    for figure in ("performance_profile.png", "learning_curves.png"):
        assert (tmp_path / figure).stat().st_size > 10_000
    again = render(tmp_path, page)  # rendering twice gives the same page: the generated part is replaced
    assert again.returncode == 0 and page.read_text() == text


def made_up_ladder() -> dict:
    """A ladder.json as training/ladder.py writes it: a, b and scripted, 4 games a pair."""
    return {"scenario": "team_capture", "env_kwargs": {"agents_per_team": 2}, "games": 4, "llm_games": 2,
            "seeds": [10000, 10001], "entrants": {"a": ["a", "a"], "a+scripted": ["a", "scripted"],
                                                  "scripted": ["scripted", "scripted"]},
            "llm_pairs": [["a", "scripted"]],
            "llm": {"turns": 1, "wait_ticks": 20, "format": "openai", "tool_choice": "auto", "max_tokens": 64,
                    "temperature": 0.7, "requests": 4, "failed_requests": 0},
            "ratings": [{"entrant": "scripted", "ordinal": 20.5, "mu": 40.0, "sigma": 6.5},
                        {"entrant": "a+scripted", "ordinal": 1.0, "mu": 20.0, "sigma": 6.33},
                        {"entrant": "a", "ordinal": -10.0, "mu": 9.0, "sigma": 6.33}],
            "matrix": {"a": {"a+scripted": [0, 1, 3], "scripted": [0, 0, 2]},
                       "a+scripted": {"a": [3, 1, 0], "scripted": [1, 1, 2]},
                       "scripted": {"a": [2, 0, 0], "a+scripted": [2, 1, 1]}},
            "against_scripted": [{"team": "a", "games": 1, "wins": 0, "draws": 0, "win_rate": 0.0,
                                  "interval": [0.0, 0.7935]},
                                 {"team": "a+scripted", "games": 2, "wins": 1, "draws": 1, "win_rate": 0.5,
                                  "interval": [0.0945, 0.9055]}],
            "wall_seconds": 12.0, "load": {"before": [1.0, 1.0, 1.0], "after": [2.0, 1.0, 1.0]},
            "created": "2026-11-27T11:00:00+00:00"}


def test_the_ladder_is_rendered_between_its_own_markers(tmp_path):
    """ladder.json alone: its part of the page is rendered (the scenarios' part left as it is), twice alike."""
    from arena_envs.training import render_results

    (tmp_path / "ladder.json").write_text(json.dumps(made_up_ladder()))
    page = tmp_path / "results.md"
    page.write_text(f"# Results\n\n{results_markers()}\n\n{render_results.LADDER_BEGIN}\nold\n"
                    f"{render_results.LADDER_END}\n\nkept below\n")
    done = render(tmp_path, page)
    assert done.returncode == 0, done.stderr[-3000:]
    text = page.read_text()
    assert results_markers() in text and text.endswith("\n\nkept below\n") and "\nold\n" not in text
    lines = text.splitlines()
    assert lines.index("| 1 | `scripted` | 20.50 | 40.00 | 6.50 | 6 |") < lines.index(
        "| 3 | `a` | -10.00 | 9.00 | 6.33 | 6 |")  # games: the row's matrix cells added up
    assert "| `a+scripted` | 3/1/0 | - | 1/1/2 |" in lines or "| `a+scripted` | 1/1/2 | - | 3/1/0 |" in lines
    assert "| `a+scripted` | 2 | 1 | 1 | 50.0% | [9.4%, 90.5%] |" in lines
    assert "`a+scripted` = `a` + `scripted`" in text and "4 model requests, 0 failed" in text
    assert (tmp_path / "ladder.png").stat().st_size > 10_000
    again = render(tmp_path, page)
    assert again.returncode == 0 and page.read_text() == text


def results_markers() -> str:
    from arena_envs.training import render_results

    return f"{render_results.BEGIN}\nold table\n{render_results.END}"


def test_time_to_solve_is_the_first_logged_point_at_the_level():
    points = {"seconds": [1.0, 2.0, 3.0, 4.0], "steps": [10, 20, 30, 40], "value": [0.1, 0.5, 0.4, 0.9]}
    assert results.time_to_solve(points, 0.5) == {"seconds": 2.0, "steps": 20}
    assert results.time_to_solve(points, 0.95) is None
    assert results.threshold(results.METRICS["foraging"], 95.7) == pytest.approx(86.13)
    assert results.threshold(results.METRICS["team_capture"], 0.02) == 0.5


def test_make_results_is_the_runs_then_the_rendering(tmp_path):
    """The short version of ``make results`` (CI's): a few updates per run of every RL scenario,
    2 seeds trained at once, then the rendering. Learning must move the losses; the exported policies must play."""
    recipe = subprocess.run(["make", "-n", "results"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "-m arena_envs.training.results" in recipe and "render_results.py docs/results" in recipe
    out, runs = tmp_path / "results", tmp_path / "runs"
    assert results.main(["--short", "--seeds", "2", "--jobs", "2", "--episodes", "4", "--out", str(out),
                         "--runs", str(runs)]) == 0
    for name, headline in results.HEADLINES.items():
        document, scenario = json.loads((out / f"{name}.json").read_text()), headline.scenario
        assert document["short"] and [r["seed"] for r in document["runs"]] == [0, 1]
        assert document["env_kwargs"] == headline.config().get("env_kwargs", {})  # 3v3: the headline's --set
        for run in document["runs"]:
            for column, (first, last) in run["losses"].items():  # each update changed the policy
                assert first != last, (name, column)
            assert run["steps"] > 0 and run["steps_per_s"] > 0 and len(run["load_after"].split()) == 3
            assert run["runs_at_once"] == 2 and run["run"].endswith(f"{name}/seed{run['seed']}")
            trained = yaml.safe_load((Path(run["run"]) / "config.yaml").read_text())
            assert trained.get("env_kwargs", {}) == document["env_kwargs"]
        if not headline.ships:
            assert document["pretrained"] is None
            continue
        shipped = Path(document["pretrained"]["file"])
        assert shipped.parent == out / "pretrained"  # a short run never replaces the package's policies
        policy = pretrained.load(str(shipped), scenario)
        assert policy.metadata["run"]["directory"] == document["pretrained"]["run"]
        opponent = agent_factory("scripted", scenario) if scenario == "team_capture" else None
        play(agent_factory(str(shipped), scenario), scenario, 2, 10_000, policy.env_kwargs, opponent)
    first = json.loads((out / "foraging.json").read_text())
    trained = [(Path(r["run"]) / "speed.json").stat().st_mtime_ns for r in first["runs"]]
    assert results.main(["--short", "--seeds", "2", "--only", "foraging", "--reuse", "--episodes", "4", "--out",
                         str(out), "--runs", str(runs)]) == 0
    again = json.loads((out / "foraging.json").read_text())
    assert [(Path(r["run"]) / "speed.json").stat().st_mtime_ns for r in again["runs"]] == trained  # not trained again
    for before, after in zip(first["runs"], again["runs"], strict=True):  # ... and its wall time and load kept
        assert [after[k] for k in ("wall_seconds", "load_after", "runs_at_once")] == \
            [before[k] for k in ("wall_seconds", "load_after", "runs_at_once")] and after["wall_seconds"] > 0
    ladder = json.loads((out / "ladder.json").read_text())  # the ladder, its LLM the scripted server's
    assert list(ladder["entrants"]) == ["scripted-llm", "scripted-llm+pretrained", "scripted-llm+scripted", "scripted",
                                        "pretrained", "pretrained+scripted", "random"]
    assert ladder["games"] == 4 and ladder["llm"]["requests"] > 0 and ladder["llm"]["failed_requests"] == 0
    page = tmp_path / "results.md"
    done = render(out, page)
    assert done.returncode == 0, done.stderr[-3000:]
    text = page.read_text()
    assert "A short run (CI)" in text
    for label in ("Foraging-v0", "Crafting-v0", "TeamCapture-v0 2v2", "TeamCapture-v0 3v3"):
        assert re.search(rf"^\| {label} \| .* \| 2 \|", text, re.M), label
    assert re.search(r"^\| `scripted-llm\+pretrained` \| 2 \| ", text, re.M)  # as blue against scripted


def test_the_shipped_page_holds_the_rendered_part():
    """docs/results.md has the markers the renderer fills, and the JSON it was rendered from ships."""
    from arena_envs.training import render_results

    text = (ROOT / "docs" / "results.md").read_text()
    assert text.count(render_results.BEGIN) == 1 and text.count(render_results.END) == 1
    assert text.count(render_results.LADDER_BEGIN) == 1 and text.count(render_results.LADDER_END) == 1
    ladder = json.loads((ROOT / "docs" / "results" / "ladder.json").read_text())
    for row in ladder["ratings"]:  # the page shows the shipped JSON's ratings
        assert f"| `{row['entrant']}` | {row['ordinal']:.2f} | {row['mu']:.2f} |" in text
    generated = text[text.index(render_results.BEGIN):text.index(render_results.END)]
    for scenario in re.findall(r"`pretrained:(\w+)`", generated):
        document = json.loads((ROOT / "docs" / "results" / f"{scenario}.json").read_text())
        assert not document["short"]
        seeds = [run["seed"] for run in document["runs"]]
        assert seeds == document["seeds"] and len(seeds) >= 2  # an interval needs two (make results runs 5)
        assert re.search(rf"^\| {render_results.label(document)} \| .* \| {len(seeds)} \| ", generated, re.M)


PLOTTED = """
import json, sys
sys.path.insert(0, sys.argv[1])
import render_results

documents = json.loads(sys.argv[2])
lines = {}
for name, figure in (("profile", render_results.profile_figure(documents, reps=50)),  # the bands only: few resamples
                     ("curves", render_results.curves_figure(documents, points=5, reps=50))):
    lines[name] = {line.get_label(): line.get_xydata().tolist() for ax in figure.axes for line in ax.lines}
print(json.dumps(lines))
"""


def test_the_plots_draw_the_normalised_scores_and_the_curves_over_steps():
    """What the two figures draw, read back from their lines: the profile of each run's metric over
    its solved level (the share of runs above each tau), and the learning curve's IQM over the
    seeds' curves interpolated at training steps (not seconds)."""
    from scipy.stats import trim_mean

    values, threshold = [0.1, 0.5, 0.6, 0.9, 0.95], 0.5
    document = made_up("team_capture", values, [None] * 5, threshold)
    for i, run in enumerate(document["runs"]):  # seconds unlike steps: the wall clock ran unevenly
        run["curve"].update(steps=[100.0, 200.0 + 20 * i, 300.0], seconds=[5.0, 6.0, 9.0 + i])
    assert STATS_PYTHON.exists(), "the stats venv is missing: make stats (make test builds it)"
    done = subprocess.run([str(STATS_PYTHON), "-c", PLOTTED, str(RENDER.parent), json.dumps([document])],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = json.loads(done.stdout)
    profile = np.array(lines["profile"]["TeamCapture-v0"])
    scores = np.array(values) / threshold
    assert profile[0, 0] == 0.0 and profile[-1, 0] == 2.0 and len(profile) == 101
    np.testing.assert_allclose(profile[:, 1], [(scores > tau).mean() for tau in profile[:, 0]], rtol=0, atol=1e-12)
    curve = np.array(lines["curves"]["IQM of 5 seeds"])
    np.testing.assert_allclose(curve[:, 0], np.linspace(100.0, 300.0, 5))
    seeds = [np.interp(curve[:, 0], run["curve"]["steps"], run["curve"]["value"]) for run in document["runs"]]
    np.testing.assert_allclose(curve[:, 1], trim_mean(np.array(seeds), 0.25, axis=0), rtol=0, atol=1e-9)
