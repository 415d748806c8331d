"""``make mutate`` (tests/mutate.py) names files and tests that exist: after a merge that moves a
module or a test, this fails here, not an hour into a mutation run."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mutate import DESELECT, MODULES, main, sample, setup_cfg, table

ROOT = Path(__file__).resolve().parents[1]


def test_every_mutated_module_and_its_tests_exist():
    missing = [path for files, tests in MODULES.values() for path in (*files, *tests) if not (ROOT / path).is_file()]
    assert missing == []
    assert {"names", "transcripts", "pool", "serve_guard", "jail"} <= set(MODULES)


def test_make_mutate_runs_the_script_with_the_modules_asked_for():
    recipe = subprocess.run(["make", "-n", "mutate", "MODULES=names pool"], cwd=ROOT, capture_output=True,
                            text=True).stdout
    assert "tests/mutate.py --every 1 --seed 0 names pool" in recipe
    sampled = subprocess.run(["make", "-n", "mutate", "MODULES=jail", "EVERY=5", "SEED=7"], cwd=ROOT,
                             capture_output=True, text=True).stdout
    assert "tests/mutate.py --every 5 --seed 7 jail" in sampled


# the jail's shape at EVERY=20: 31 functions of 2 to 16 mutants, 15 of 40 to 110
FUNCTIONS = {f"arena_envs.tools.sandbox_jail.x_small_{n}": 2 + n % 15 for n in range(31)} | {
    f"arena_envs.tools.sandbox_jail.x_large_{n}": 40 + 5 * n for n in range(15)}
NAMES = [f"{function}__mutmut_{number}" for function, count in FUNCTIONS.items() for number in range(1, count + 1)]


def test_a_sample_is_drawn_over_all_mutants_so_small_functions_are_sampled_too():
    """Every 20th mutant within each function never sampled a function of fewer than 20 (31
    of the jail's 46): a seeded draw over the whole module samples them in proportion."""
    chosen = sample(NAMES, 20)
    assert len(chosen) == round(len(NAMES) / 20) and set(chosen) <= set(NAMES) and chosen == sorted(set(chosen))
    small = {name for name in chosen if "x_small_" in name}
    assert len(small) >= 3, small  # 20-ish expected of ~260 small-function mutants in 1,700
    assert sample(NAMES, 20) == chosen  # the same seed, the same sample: a rate can be re-checked
    assert sample(list(reversed(NAMES)), 20) == chosen  # whatever order mutmut lists them in
    assert sample(NAMES, 20, seed=1) != chosen
    assert sample(NAMES, 1) == sorted(NAMES)
    assert len(sample(NAMES[:3], 20)) == 1  # a module of fewer mutants than the step: one
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="--every must be a positive integer"):
            sample(NAMES, bad)


def test_bad_options_are_refused_before_any_run(capsys):
    assert main(["--every", "0", "names"]) == 2
    assert "--every must be a positive integer, got 0" in capsys.readouterr().err
    assert main(["--seed", "x"]) == 2
    assert "--seed takes a number" in capsys.readouterr().err
    assert main(["--every", "5", "nosuch"]) == 2
    assert "no module ['nosuch']" in capsys.readouterr().err


STUB = """#!{python}
# mutmut as tests/mutate.py calls it: 'results --all true' lists every mutant's status, 'run NAMES'
# judges those named (the ones in SURVIVE survive); 'run make-the-mutants-only' makes the mutants
import json, sys
from pathlib import Path
state, calls = Path("state.json"), Path("calls.txt")
with calls.open("a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
statuses = json.loads(state.read_text()) if state.exists() else {{}}
if sys.argv[1:3] == ["run", "make-the-mutants-only"]:
    state.write_text(json.dumps({{name: statuses.get(name, "not checked") for name in {names!r}}}))
    raise SystemExit(1)  # mutmut stops at the filter, which no mutant matches
if sys.argv[1] == "run":
    for name in sys.argv[4:]:
        statuses[name] = "survived" if name in {survive!r} else "timeout" if name.endswith("_1") else "killed"
    state.write_text(json.dumps(statuses))
if sys.argv[1] == "results":
    for name, status in statuses.items():
        print(f"    {{name}}: {{status}}")
"""


def test_a_run_judges_the_sample_and_keeps_its_verdicts_in_build_mutate(tmp_path, monkeypatch):
    import mutate

    names = NAMES[:400]
    survive = sample(names, 20)[:2]
    stub = tmp_path / "mutmut"
    stub.write_text(STUB.format(python=sys.executable, names=names, survive=survive))
    stub.chmod(0o755)
    monkeypatch.setattr(mutate, "MUTMUT", stub)
    monkeypatch.setattr(mutate, "ROOT", tmp_path)
    work = tmp_path / "build" / "mutate" / "jail"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)  # the stub keeps its state in its working directory, the module's folder

    counts = mutate.run("jail", every=20, seed=0)
    chosen = sample(names, 20)
    runs = (work / "calls.txt").read_text().splitlines()
    assert runs[0] == "run make-the-mutants-only"
    assert f"run --max-children 2 {' '.join(chosen)}" in runs  # only the sample is judged
    assert counts == {"total": 400, "sampled": 20, "judged": 20, "killed": 18,
                      "timeout": sum(n.endswith("_1") for n in chosen if n not in survive), "survived": 2,
                      "no_tests": 0}
    kept = json.loads((work / "results.json").read_text())
    assert (kept["every"], kept["seed"], kept["total"], kept["judged"], kept["kill_rate"]) == (20, 0, 400, 20, 0.9)
    assert sorted(kept["verdicts"]) == chosen and {kept["verdicts"][n] for n in survive} == {"survived"}
    assert (work / "survivors.txt").read_text().split() == sorted(survive)

    (work / "calls.txt").unlink()
    again = mutate.run("jail", every=20, seed=0)  # a re-run judges only the survivors again
    assert again == counts
    assert (work / "calls.txt").read_text().splitlines()[1:3] == [
        "results --all true", f"run --max-children 2 {' '.join(sorted(survive))}"]


def test_the_report_gives_each_modules_rate_with_the_count_judged():
    counts = {"total": 1099, "sampled": 55, "judged": 52, "killed": 47, "timeout": 3, "survived": 5, "no_tests": 3}
    report = table([("jail", counts, 600.0)], 20, 0)
    assert report.splitlines()[0].startswith("a sample: one mutant in 20, drawn at random with seed 0")
    assert "| jail | 1099 | 55 | 52 | 47 (3) | 5 | 3 | 90.4% | 10.0 |" in report.splitlines()
    assert not table([("names", counts, 60.0)], 1, 0).startswith("a sample")


def test_a_modules_config_mutates_only_its_files_against_only_its_tests():
    text = setup_cfg(["arena_envs/names.py"], ["tests/test_names_cli.py"])
    section = text.split("[tool:pytest]")[0]
    assert "only_mutate =\n    arena_envs/names.py\n" in section
    assert "pytest_add_cli_args_test_selection =\n    tests/test_names_cli.py\n" in section
    assert "--deselect" not in section
    deselected = setup_cfg(["arena_envs/tools/pool.py"], ["tests/test_stateful_tools.py"], DESELECT["pool"])
    assert f"    --deselect\n    {DESELECT['pool'][0]}\n" in deselected.split("[tool:pytest]")[0]
