"""``make mutate`` (tests/mutate.py) names files and tests that exist: after a merge that moves a
module or a test, this fails here, not an hour into a mutation run."""

import subprocess
from pathlib import Path

import pytest
from mutate import DESELECT, MODULES, sample, setup_cfg

ROOT = Path(__file__).resolve().parents[1]


def test_every_mutated_module_and_its_tests_exist():
    missing = [path for files, tests in MODULES.values() for path in (*files, *tests) if not (ROOT / path).is_file()]
    assert missing == []
    assert {"names", "transcripts", "pool", "serve_guard", "jail"} <= set(MODULES)


def test_make_mutate_runs_the_script_with_the_modules_asked_for():
    recipe = subprocess.run(["make", "-n", "mutate", "MODULES=names pool"], cwd=ROOT, capture_output=True,
                            text=True).stdout
    assert "tests/mutate.py --every 1 names pool" in recipe
    sampled = subprocess.run(["make", "-n", "mutate", "MODULES=jail", "EVERY=5"], cwd=ROOT, capture_output=True,
                             text=True).stdout
    assert "tests/mutate.py --every 5 jail" in sampled


def test_a_sample_names_the_mutants_whose_number_is_a_multiple_and_a_bad_step_is_refused():
    import fnmatch

    names = [f"arena_envs.names.x_find__mutmut_{n}" for n in range(1, 241)]
    for every in (2, 5, 10, 20):
        (pattern,) = sample(every)
        assert [n for n in range(1, 241) if fnmatch.fnmatch(names[n - 1], pattern)] == list(range(every, 241, every))
    assert sample(1) == []
    with pytest.raises(ValueError, match="--every must be 1, 2, 5, 10 or 20, got 3"):
        sample(3)


def test_a_modules_config_mutates_only_its_files_against_only_its_tests():
    text = setup_cfg(["arena_envs/names.py"], ["tests/test_names_cli.py"])
    section = text.split("[tool:pytest]")[0]
    assert "only_mutate =\n    arena_envs/names.py\n" in section
    assert "pytest_add_cli_args_test_selection =\n    tests/test_names_cli.py\n" in section
    assert "--deselect" not in section
    deselected = setup_cfg(["arena_envs/tools/pool.py"], ["tests/test_stateful_tools.py"], DESELECT["pool"])
    assert f"    --deselect\n    {DESELECT['pool'][0]}\n" in deselected.split("[tool:pytest]")[0]
