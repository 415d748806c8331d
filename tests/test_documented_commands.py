"""Every shell command that README.md and docs/ show is run by a test, through its real entry point.

The commands are read from the fenced ``bash``, ``console`` and ``shell`` blocks (a
backslash continues a line, ``#`` starts a comment, a ``$ `` prompt is dropped). Each one
must be either
- run here at small scale (``RUN_HERE``: the same program with smaller arguments, run as a
  subprocess from the venv's ``bin``, as a user's shell would run it),
- run by a named test (``TESTED_BY``: a pytest node id, checked to exist), also given in a
  page by a comment ``<!-- tested-by: tests/test_x.py::test_y -->`` on the line before a
  block, for every command of that block,
- or another project's program that the docs only show how to use (``OUTSIDE``, with why
  no test runs it).
A command in none of them fails ``test_every_documented_command_is_run_by_a_test``.
"""

from __future__ import annotations

import ast
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from process_helpers import free_port

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FENCE = re.compile(r"^(?:<!--\s*tested-by:\s*(?P<node>\S+)\s*-->\n)?```(?:bash|console|shell)[^\n]*\n(?P<body>.*?)^```",
                   re.M | re.S)


def documented_commands(pages: list[Path] | None = None) -> dict[str, tuple[str, str | None]]:
    """Each command -> (the first page showing it, the test a page's comment names or None)."""
    if pages is None:
        pages = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)]
    commands: dict[str, tuple[str, str | None]] = {}
    for page in pages:
        for block in FENCE.finditer(page.read_text()):
            for line in block["body"].replace("\\\n", " ").splitlines():
                command = " ".join(re.sub(r"(^|\s)#.*$", "", line.strip().removeprefix("$ ")).split())
                if command:
                    where = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name
                    commands.setdefault(command, (str(where), block["node"]))
    return commands


# documented command -> the same program at small scale, run in a temporary directory
RUN_HERE: dict[str, list[str]] = {
    "arena-bench --only foraging reference --seconds 1": ["arena-bench", "--only", "foraging", "reference",
                                                          "--seconds", "0.05"],
    "arena-agent arena_envs/TreasureHunt-v0 --agent scripted --format hermes --episodes 16 --out runs/scripted-hunt":
        ["arena-agent", "arena_envs/TreasureHunt-v0", "--agent", "scripted", "--format", "hermes", "--episodes", "2",
         "--out", "runs/scripted-hunt", "--quiet"],
    "arena-agent arena_envs/TreasureHunt-v0 --agent scripted --format hermes --episodes 16":
        ["arena-agent", "arena_envs/TreasureHunt-v0", "--agent", "scripted", "--format", "hermes", "--episodes", "2",
         "--quiet"],
}

LLM = "tests/test_llm_agent.py::"
LLM_FORMATS = LLM + "test_treasure_hunt_easy_solved_in_every_episode_in_each_format"
LEAN = "tests/test_ppo_lean.py::"
SB3 = "tests/test_training_run.py::"
SB3_RUN = SB3 + "test_train_resume_and_evaluate_write_their_outputs"
SERVE = "tests/test_serve_server.py::"
HERE = "tests/test_documented_commands.py::"
PACKAGING = "tests/test_packaging.py::"
WHEEL_RUN = PACKAGING + "test_the_wheel_installs_in_a_clean_venv_and_runs_arena_bench"

# documented command -> the test that runs it (the same entry point, at a small scale)
TESTED_BY: dict[str, str] = {
    "make test": HERE + "test_make_test_is_what_ci_runs",
    "make demo": HERE + "test_make_demo_runs_the_demo_at_small_scale",
    "sphinx-build -W --keep-going -b html docs docs/_build/html": "tests/test_docs_build.py::"
                                                                  "test_docs_site_builds_without_a_warning",
    # install and packaging
    "pip install -e '.[llm]'": WHEEL_RUN,
    "python -m build": PACKAGING + "test_build_makes_an_sdist_and_a_wheel_that_twine_accepts",
    "pip install dist/arena_envs-0.1.0-py3-none-any.whl": WHEEL_RUN,
    "arena-bench --only foraging --seconds 1": WHEEL_RUN,
    # speed
    "arena-bench --seconds 2 --json runs/bench.json": "tests/test_core.py::test_bench_prints_a_table_with_ratios",
    # LLM agents against the scripted OpenAI-compatible server on 127.0.0.1
    "python -m arena_envs.llm.server --port 8000 &": HERE + "test_the_llm_quickstart_runs_against_the_scripted_server",
    "arena-agent arena_envs/TreasureHunt-v0 --base-url http://127.0.0.1:8000/v1 --model scripted-hermes --episodes 4 "
    "--out runs/hunt": HERE + "test_the_llm_quickstart_runs_against_the_scripted_server",
    "arena-agent arena_envs/TreasureHunt-v0 --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-8B --episodes 64 "
    "--concurrency 32 --out runs/qwen3-hunt": LLM_FORMATS,
    "arena-agent arena_envs/TreasureHunt-v0 --base-url http://127.0.0.1:11434/v1 --model qwen3:8b --episodes 16 "
    "--concurrency 4 --env-arg difficulty=medium": LLM_FORMATS,
    "arena-agent arena_envs/Foraging-v0 --base-url ... --model ... --episodes 64 --group-size 8 --wait-ticks 50":
        LLM + "test_groups_share_their_seed_with_advantages_and_pass_at_k",
    "arena-agent arena_envs/TeamCapture-v0 --base-url ... --model ... --chat-agents blue_agent_1,blue_agent_2 "
    "--wait-ticks 40": LLM + "test_team_capture_with_two_chat_agents_through_the_server",
    # serving
    "arena-serve foraging --max-sessions 1024":
        SERVE + "test_arena_serve_cli_binds_loopback_and_stops_cleanly_on_sigterm",
    'arena-serve treasure_hunt --port 8100 --env-kwarg difficulty=medium --api-key "$KEY"':
        SERVE + "test_every_route_needs_the_api_key_when_one_is_set",
    "openenv validate http://127.0.0.1:8000": SERVE + "test_openenv_validate_passes_for_every_scenario_served",
    "arena-serve export foraging openenv-foraging": "tests/test_openenv_export.py::"
                                                    "test_the_export_passes_openenv_validate_and_serves",
    "openenv validate openenv-foraging": "tests/test_openenv_export.py::"
                                         "test_the_export_passes_openenv_validate_and_serves",
    # training and evaluation (train() and evaluate() are the console scripts' main functions)
    "arena-train Foraging-v0 --algo sb3-ppo --timesteps 3000000 --n-envs 64 --seed 0 --out runs/foraging":
        SB3_RUN,
    "arena-train Foraging-v0 --algo sb3-ppo --timesteps 5000000 --out runs/foraging --resume":
        SB3_RUN,
    "arena-eval runs/foraging Foraging-v0 --episodes 200 --rollout": SB3_RUN,
    "arena-train Foraging-v0 --algo sb3-ppo --out runs/foraging": SB3_RUN,
    "arena-eval runs/foraging Foraging-v0 --episodes 200": SB3_RUN,
    "arena-train Crafting-v0 --algo sb3-ppo --out runs/crafting": SB3 + "test_short_runs_of_the_other_scenarios_write_"
                                                                       "their_outputs[Crafting-v0]",
    "arena-eval runs/crafting Crafting-v0 --episodes 200":
        SB3 + "test_short_runs_of_the_other_scenarios_write_their_outputs[Crafting-v0]",
    "arena-eval runs/crafting Crafting-v0 --episodes 200 --stochastic --out runs/crafting/stochastic":
        SB3 + "test_short_runs_of_the_other_scenarios_write_their_outputs[Crafting-v0]",
    "arena-train team_capture_v0 --algo sb3-ppo --out runs/team_capture":
        SB3 + "test_short_runs_of_the_other_scenarios_write_their_outputs[team_capture_v0]",
    "arena-eval runs/team_capture team_capture_v0 --episodes 64":
        SB3 + "test_short_runs_of_the_other_scenarios_write_their_outputs[team_capture_v0]",
    "arena-train Foraging-v0 --out runs/lean": LEAN + "test_foraging_run_directory_is_what_arena_eval_reads",
    "arena-eval runs/lean Foraging-v0 --episodes 200 --stochastic": LEAN + "test_foraging_run_directory_is_what_arena_"
                                                                           "eval_reads",
    "arena-eval runs/lean Foraging-v0 --episodes 200": LEAN + "test_foraging_run_directory_is_what_arena_eval_reads",
    "arena-eval runs/lean Foraging-v0 --episodes 200 --stochastic --rollout":
        LEAN + "test_foraging_run_directory_is_what_arena_eval_reads",
    "arena-train Foraging-v0 --num-workers 2 --out runs/lean2": LEAN + "test_sharded_training_is_the_same_training",
    "arena-train Foraging-v0 --algo ppo --config training/configs/foraging.yaml --out runs/same":
        LEAN + "test_the_sb3_config_runs_under_either_trainer",
    "arena-train team_capture_v0 --out runs/lean_tc": LEAN + "test_team_capture_self_play_logs_its_evaluation",
    "arena-train team_capture_v0 --timesteps 2000000 --out runs/lean_tc":
        LEAN + "test_team_capture_self_play_logs_its_evaluation",
    "arena-eval runs/lean_tc team_capture_v0 --episodes 64": LEAN + "test_team_capture_self_play_logs_its_evaluation",
    "arena-train Crafting-v0 --out runs/lean_crafting": LEAN + "test_crafting_runs",
    "arena-eval runs/lean_crafting Crafting-v0 --episodes 200 --stochastic": LEAN + "test_crafting_runs",
    "arena-bench --only training": LEAN + "test_arena_bench_training_row_sets_training_against_its_envs_alone",
}

# other projects' programs: the docs show how to use them with the arena, no test here runs them
OUTSIDE: dict[str, str] = {
    "vllm serve Qwen/Qwen3-8B --enable-auto-tool-choice --tool-call-parser hermes --port 8000":
        "vLLM serving an 8B model needs a GPU; arena-agent's side is tested against the scripted server",
    "ollama pull qwen3:8b": "downloads a model from Ollama's registry (no network here)",
    "tensorboard --logdir runs/foraging/tb": "TensorBoard's own viewer; the test checks the event files it reads",
    "openenv push openenv-foraging --repo-id YOUR_NAME/arena-foraging":
        "uploads to a Hugging Face Space: needs an account and the network; the package it pushes is validated",
}


def node_exists(node: str) -> bool:
    """A pytest node id ``path::function`` (or ``path::Class::method``, parameters ignored) names a test."""
    path, *names = node.split("::")
    file = ROOT / path
    if not file.is_file() or not names:
        return False
    scope = ast.parse(file.read_text()).body
    for name in (n.split("[")[0] for n in names):
        found = [d for d in scope if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                 and d.name == name]
        if not found:
            return False
        scope = getattr(found[0], "body", [])
    return True


def test_every_documented_command_is_run_by_a_test():
    commands = documented_commands()
    assert "make test" in commands and "make demo" in commands  # the README's two commands
    missing = [f"{page}: {command}" for command, (page, node) in commands.items()
               if node is None and command not in RUN_HERE | TESTED_BY | OUTSIDE]
    assert not missing, "commands shown with no test (add one to tests/test_documented_commands.py):\n" + \
        "\n".join(missing)


def test_each_named_test_exists_and_each_entry_is_shown():
    commands = documented_commands()
    named = [*TESTED_BY.values(), *(node for _, node in commands.values() if node)]
    assert [node for node in named if not node_exists(node)] == []
    assert [c for c in RUN_HERE | TESTED_BY | OUTSIDE if c not in commands] == [], "stale entries"


def test_commands_are_read_as_a_shell_reads_them_and_a_page_can_name_their_test(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```bash\n$ arena-bench \\\n    --only foraging   # a comment\n# only a comment\n```\n\n"
                    "<!-- tested-by: tests/test_core.py::test_arena_bench_console_script_exits_zero -->\n"
                    "```console\narena-bench --only reference\n```\n```python\nprint('not a command')\n```\n")
    assert documented_commands([page]) == {
        "arena-bench --only foraging": ("page.md", None),
        "arena-bench --only reference": ("page.md", "tests/test_core.py::test_arena_bench_console_script_exits_zero")}
    assert node_exists("tests/test_core.py::test_arena_bench_console_script_exits_zero")
    assert not node_exists("tests/test_core.py::test_no_such_test")


@pytest.mark.parametrize("command", sorted(RUN_HERE))
def test_documented_command_runs_at_small_scale(command, tmp_path):
    argv = RUN_HERE[command]
    assert argv[0] == command.split()[0], "the small run must use the documented program"
    done = subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr[-3000:]


def test_make_test_is_what_ci_runs():
    """`make test` is the suite this file belongs to: CI's script runs exactly that."""
    assert "make test" in (ROOT / ".ci" / "run").read_text().splitlines()
    recipe = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "-m pytest" in recipe and "ruff check" in recipe


def test_make_demo_runs_the_demo_at_small_scale(tmp_path):
    """`make demo` is `python -m arena_envs.demo`; the same module with fewer steps, episodes and sections."""
    recipe = subprocess.run(["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "-m arena_envs.demo" in recipe
    done = subprocess.run([sys.executable, "-m", "arena_envs.demo", "--timesteps", "16384", "--episodes", "2",
                           "--bench-seconds", "0.01", "--bench-only", "foraging", "reference",
                           "--out", str(tmp_path / "demo")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("ppo/eval.md", "ppo/rollout.gif", "bench.md"):
        assert (tmp_path / "demo" / name).is_file(), name



def test_the_llm_quickstart_runs_against_the_scripted_server(tmp_path):
    """The LLM quickstart's two commands: the scripted model server, then arena-agent through the real client."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "arena_envs.llm.server", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "the model server did not start"
                time.sleep(0.2)
        done = subprocess.run([str(BIN / "arena-agent"), "arena_envs/TreasureHunt-v0", "--base-url",
                               f"http://127.0.0.1:{port}/v1", "--model", "scripted-hermes", "--episodes", "2",
                               "--out", "runs/hunt", "--quiet"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert (tmp_path / "runs" / "hunt" / "transcripts.jsonl").read_text().count("\n") == 2
    finally:
        server.terminate()
        server.wait(timeout=30)
