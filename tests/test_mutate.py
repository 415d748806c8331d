"""``make mutate`` (tests/mutate.py) names files and tests that exist: after a merge that moves a
module or a test, this fails here, not an hour into a mutation run."""

import subprocess
from pathlib import Path

from mutate import MODULES, setup_cfg

ROOT = Path(__file__).resolve().parents[1]


def test_every_mutated_module_and_its_tests_exist():
    missing = [path for files, tests in MODULES.values() for path in (*files, *tests) if not (ROOT / path).is_file()]
    assert missing == []
    assert {"names", "transcripts", "pool", "serve_guard", "jail"} <= set(MODULES)


def test_make_mutate_runs_the_script_with_the_modules_asked_for():
    recipe = subprocess.run(["make", "-n", "mutate", "MODULES=names pool"], cwd=ROOT, capture_output=True,
                            text=True).stdout
    assert "tests/mutate.py names pool" in recipe


def test_a_modules_config_mutates_only_its_files_against_only_its_tests():
    text = setup_cfg(["arena_envs/names.py"], ["tests/test_names_cli.py"])
    section = text.split("[tool:pytest]")[0]
    assert "only_mutate =\n    arena_envs/names.py\n" in section
    assert "pytest_add_cli_args_test_selection =\n    tests/test_names_cli.py\n" in section
