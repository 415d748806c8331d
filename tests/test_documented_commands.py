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

A named test must run the command it is named for: the test (with the module-level helpers,
constants and fixtures it reaches) names the command's program and every one of its flags,
or it reads the command from its page. A test that runs a smaller command instead states it
in ``EQUIVALENT``. And every command goes through its program's real argument parser here
(``test_each_documented_command_parses``): a misspelt flag or an unknown extra fails at once.
"""

from __future__ import annotations

import argparse
import ast
import configparser
import contextlib
import io
import os
import re
import runpy
import shlex
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from process_helpers import free_port, serving

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
    "arena-bench --seconds 2 --json runs/bench.json": ["arena-bench", "--only", "foraging", "reference", "--seconds",
                                                       "0.05", "--json", "runs/bench.json"],  # all rows: minutes
    "arena-bench --only foraging reference --seconds 1": ["arena-bench", "--only", "foraging", "reference",
                                                          "--seconds", "0.05"],
    # on the CPU, eager: torch.compile takes minutes there, and CI has no GPU (the peers are not installed)
    "arena-bench --device cuda --seconds 1 --json runs/gpu.json": ["arena-bench", "--device", "cpu", "--sizes", "16",
                                                                   "--modes", "eager", "--seconds", "0.05",
                                                                   "--json", "runs/gpu.json"],
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
DEMO = "tests/test_demo.py::"
PACKAGING = "tests/test_packaging.py::"
WHEEL_RUN = PACKAGING + "test_the_wheel_installs_in_a_clean_venv_and_runs_arena_bench"

VF_EVAL = ".venv-verifiers/bin/vf-eval"  # verifiers' CLI, in the venv `make verifiers` builds

# documented command -> the test that runs it (the same entry point, at a small scale)
TESTED_BY: dict[str, str] = {
    "make test": HERE + "test_make_test_is_what_ci_runs",
    "make demo": DEMO + "test_make_demo_trains_ppo_past_random_to_the_scripted_forager_and_says_where_to_look",
    "make bench": DEMO + "test_make_bench_is_the_full_arena_bench",
    "arena-view runs/demo/team_capture": DEMO + "test_arena_view_serves_the_demo_match_as_the_demo_prints_it",
    "sphinx-build -W --keep-going -b html docs docs/_build/html": "tests/test_docs_build.py::"
                                                                  "test_docs_site_builds_without_a_warning",
    # install and packaging
    "pip install -e '.[llm]'": WHEEL_RUN,
    "pip install -e '.[train,grpo]' -c constraints.txt": HERE + "test_each_documented_install_is_in_what_make_installs",
    "pip install -e '.[llm,llama]'": HERE + "test_each_documented_install_is_in_what_make_installs",
    "python -m build": PACKAGING + "test_build_makes_an_sdist_and_a_wheel_that_twine_accepts",
    "pip install dist/arena_envs-0.1.0-py3-none-any.whl": WHEEL_RUN,
    "arena-bench --only foraging --seconds 1": WHEEL_RUN,
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
        HERE + "test_the_serving_guide_command_serves_with_its_key_and_difficulty",
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

# documented command -> (what its named test runs instead, why that is the same): a run of minutes
# or hours made small in ways the flags' values alone cannot say
EQUIVALENT: dict[str, tuple[str, str]] = {
    "arena-agent arena_envs/Foraging-v0 --base-url ... --model ... --episodes 64 --group-size 8 --wait-ticks 50": (
        "arena-agent arena_envs/TreasureHunt-v0 --base-url URL --model scripted-llama3_json --episodes 12 "
        "--group-size 4 --seed 30",
        "groups are made the same way in every scenario; --wait-ticks 50 on Foraging runs in "
        "test_foraging_scripted_through_chat_scores_within_noise_of_the_scripted_forager"),
    "arena-serve foraging --max-sessions 1024": (
        "python -m arena_envs.serve treasure_hunt --port 8000 --max-sessions 2",
        "the console script's own module (arena-serve is arena_envs.serve's main), on a free port; "
        "the size of --max-sessions is tested in tests/test_serve_sessions.py"),
    "arena-train TreasureHunt-v0 --env-arg difficulty=easy --threads 2 --algo grpo --model runs/sft18 --max-steps 9 "
    "--save-steps 1 --group-size 4 --groups 4 --max-turns 10 --max-new-tokens 48 --max-completion-tokens 1536 "
    "--no-call-penalty 0.05 --learning-rate 1e-5 --keep-checkpoints 3 --out runs/grpo": (
        "arena-train TreasureHunt-v0 --env-arg difficulty=easy --threads 2 --algo grpo --model runs/sft --max-steps 2 "
        "--group-size 2 --groups 2 --max-turns 2 --max-new-tokens 24 --no-call-penalty 0.1 --out runs/grpo",
        "the guide's 25-minute run at 2 steps of 2 groups of 2 (the module fixture); --save-steps and "
        "--keep-checkpoints run in test_interrupted_run_resumes_from_its_last_checkpoint; "
        "--max-completion-tokens binds at neither size (10 turns of 48 tokens there, 2 of 24 here)"),
    "python -m arena_envs.training.llm_eval runs/grpo/checkpoints/checkpoint-5 --env TreasureHunt-v0 --env-arg "
    "difficulty=easy --episodes 128 --batch 32 --max-new-tokens 48 --max-turns 10 --seed 100000 "
    "--baseline runs/eval_sft18.json --json runs/eval_grpo.json": (
        "python -m arena_envs.training.llm_eval runs/grpo --episodes 3 --batch 3 --max-new-tokens 8 "
        "--baseline runs/eval.json --json runs/again.json",
        "the guide's 128 hunts on the module fixture's run directory, whose config.yaml gives the scenario "
        "and its arguments that --env and --env-arg give for a checkpoint folder (which has no config.yaml)"),
    "arena-train team_capture_v0 --max-minutes 20 --out runs/league": (
        "arena-train team_capture_v0 --config c.yaml --out run --no-progress --timesteps 192",
        "the results page's 20-minute league run at 3 updates of a small league config (small_config); "
        "--max-minutes only bounds the wall time, which the 192-step run never reaches"),
}

# other projects' programs: the docs show how to use them with the arena, no test here runs them
OUTSIDE: dict[str, str] = {
    "vllm serve Qwen/Qwen3-8B --enable-auto-tool-choice --tool-call-parser hermes --port 8000":
        "vLLM serving an 8B model needs a GPU; arena-agent's side is tested against the scripted server",
    "ollama pull qwen3:8b": "downloads a model from Ollama's registry (no network here)",
    "tensorboard --logdir runs/foraging/tb": "TensorBoard's own viewer; the test checks the event files it reads",
    "python -m server.app --port 8000 &":
        "an exported OpenEnv package's own server, run in the folder `arena-serve export` wrote (not this "
        "checkout's); tests/test_openenv_export.py's package_server runs exactly this in each exported package",
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


# -- each command through its program's real parser -------------------------------------

class Parsed(BaseException):
    """Raised in place of a program's work once its parser has accepted the command line; an argparse
    parser's own and what it read come with it."""

    def __init__(self, parser: argparse.ArgumentParser | None = None, namespace: argparse.Namespace | None = None):
        super().__init__()
        self.parser, self.namespace = parser, namespace


def scenario_mistake(name: str) -> str | None:
    from arena_envs.names import UnknownNameError, resolve

    try:
        resolve(name)
    except UnknownNameError as error:
        return str(error)
    return None


def agent_mistake(name: str, scenario: str) -> str | None:
    """arena-eval's MODEL_OR_BASELINE (and arena-view --play's AGENT): a baseline, a shipped policy that
    plays ``scenario``, or a path (every run a page shows is under runs/, every file has its suffix)."""
    from arena_envs import pretrained

    if name in ("random", "scripted"):
        return None
    if pretrained.is_pretrained(name):
        try:
            pretrained.load(name, scenario)
        except Exception as error:  # the program's own one-line refusal
            return f"{name}: {error}"
        return None
    if "/" in name or name.endswith((".zip", ".npz")):
        return None
    return f"{name!r} is no baseline (random, scripted), shipped policy (pretrained[:scenario]) or path"


def ladder_mistakes(teams: list[str], namespace: argparse.Namespace) -> list[str]:
    """arena-eval --ladder's TEAMs, each read as the ladder reads it (its seats' names, their number)."""
    from arena_envs.training.common import load_config
    from arena_envs.training.ladder import SCENARIO, Entrant, UsageError

    settings = {**load_config(SCENARIO).get("env_kwargs", {}), **dict(namespace.env_arg)}
    mistakes = []
    for team in teams:
        try:
            Entrant.parse(team, settings.get("agents_per_team", 2))
        except UsageError as error:
            mistakes.append(str(error))
    return mistakes


# a documented command's positional arguments, by the name its parser gives them: each is a name the program
# resolves only once it runs (read here as the program reads it, so that a misspelt one fails at once), or
# one of these, a path or a model id the program reads or writes (ours, then sphinx-build's and build's)
FREE_POSITIONALS = {"paths", "directory", "run", "folder", "model", "sourcedir", "outputdir", "filenames", "srcdir"}


def name_mistakes(parser: argparse.ArgumentParser, namespace: argparse.Namespace) -> list[str]:
    """What the program would refuse among the names a parsed command line holds, only once it runs:
    a scenario (any spelling), arena-eval's agent and scenario, arena-eval --ladder's teams, arena-view
    --play's agent and scenario. A positional argument neither checked nor free is a mistake here too,
    so that a new one gets its check."""
    found = vars(namespace)
    mistakes: list[str] = []
    for action in parser._actions:
        if action.option_strings or action.dest not in found or found[action.dest] is None:
            continue
        value = found[action.dest]
        if action.dest in ("env", "env_id", "scenario"):
            agent = found["model"] if parser.prog == "arena-eval" else None  # MODEL_OR_BASELINE plays it
            mistakes.append(scenario_mistake(value) or (agent and agent_mistake(agent, value)))
        elif action.dest == "entrants":
            mistakes += ladder_mistakes(value, namespace)
        elif action.dest not in FREE_POSITIONALS:
            mistakes.append(f"{parser.prog}'s positional {action.dest!r} is unchecked: check it in "
                            "tests/test_documented_commands.py (name_mistakes), or add it to FREE_POSITIONALS")
    if found.get("play"):  # arena-view --play AGENT SCENARIO: arena-eval's two positionals
        agent, scenario = found["play"]
        mistakes.append(scenario_mistake(scenario) or agent_mistake(agent, scenario))
    return [mistake for mistake in mistakes if mistake]


def argv_of(command: str) -> list[str]:
    """A documented command as the shell splits it: a shell variable stands for a value the
    reader supplies (``$GGUF_DIR``), and a trailing ``&`` only sends it to the background."""
    words = [re.sub(r"\$\{?(\w+)\}?", r"\1", word) for word in shlex.split(command)]
    return words[:-1] if words[-1] == "&" else words


def extras() -> set[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return set(config["options.extras_require"])


def pip_mistakes(argv: list[str]) -> list[str]:
    """``pip install ...`` through pip's own parser, then what pip would only find out by installing:
    an extra of arena-envs that setup.cfg lacks, a constraints file or a wheel that is not ours."""
    from pip._internal.commands import create_command

    assert argv[1] == "install", argv
    options, targets = create_command("install").parse_args(argv[2:])
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    name, version = config["metadata"]["name"].replace("-", "_"), config["metadata"]["version"]
    mistakes = [f"no constraints file {c}" for c in options.constraints if not (ROOT / c).is_file()]
    for target in [*targets, *options.editables]:
        local = re.fullmatch(r"\.(?:\[(.*)\])?", target)
        if local:
            mistakes += [f"no extra {e!r} in setup.cfg" for e in (local[1] or "").split(",") if e and e not in extras()]
        elif target.endswith(".whl") and not Path(target).name.startswith(f"{name}-{version}-"):
            mistakes.append(f"{target} is not the wheel of {name} {version}")
        elif not target.endswith(".whl"):
            mistakes.append(f"{target}: not this project")
    return mistakes


def parse_error(argv: list[str]) -> str | None:
    """None when ``argv``'s program accepts it, as the shell would start it, else why not.

    A console script is its entry point, ``python -m M`` and ``python FILE`` run as the shell
    would run them: each up to its ``argparse`` parser (or its click command's), whose success
    stops it there (nothing runs). ``pip install`` goes through pip's parser, ``make`` through ``make -n``."""
    program = argv[0]
    if program == "pip":
        return "; ".join(pip_mistakes(argv)) or None
    if program == "make":
        done = subprocess.run(["make", "-n", *argv[1:]], cwd=ROOT, capture_output=True, text=True)
        return done.stderr.strip() or None if done.returncode else None
    if program == VF_EVAL:  # verifiers' own venv (make verifiers): its parser, run there
        done = subprocess.run([str(ROOT / ".venv-verifiers" / "bin" / "python"), "-c",
                               "import sys; from verifiers.legacy.scripts.eval import build_parser; "
                               "build_parser().parse_args(sys.argv[1:])", *argv[1:]],
                              capture_output=True, text=True, timeout=120)
        return done.stderr.strip()[-2000:] or "failed" if done.returncode else None
    if program == "python" and argv[1:2] == ["-m"]:
        sys_argv, start = [argv[2], *argv[3:]], lambda: runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
    elif program == "python" and argv[1].endswith(".py"):
        sys_argv, start = argv[1:], lambda: runpy.run_path(str(ROOT / argv[1]), run_name="__main__")
    else:
        scripts = entry_points(group="console_scripts", name=program)
        if not scripts:
            return f"no program {program!r} is known here (a console script, python -m, python FILE, pip or make)"
        sys_argv, start = argv, lambda: next(iter(scripts)).load()()
    import importlib

    def parsed(namespace=None, parser=None):
        raise Parsed(parser, namespace)

    def leaf_parsed(parse):  # a click command's line, once its last (sub)command has read it
        return lambda self, ctx, args: parse(self, ctx, args) if hasattr(self, "commands") else \
            parsed(parse(self, ctx, args))

    stderr = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(stderr), \
            contextlib.redirect_stdout(io.StringIO()):
        parse_args = argparse.ArgumentParser.parse_args
        patch.setattr(argparse.ArgumentParser, "parse_args", lambda self, *a: parsed(parse_args(self, *a), self))
        for click in ("click.core", "typer._click.core"):  # Typer carries a click of its own
            with contextlib.suppress(ImportError):
                command = importlib.import_module(click).Command
                patch.setattr(command, "parse_args", leaf_parsed(command.parse_args))
        patch.setattr(sys, "argv", sys_argv)
        try:
            start()
        except Parsed as accepted:
            if accepted.parser is None:  # a click command's line: its names are its own to check
                return None
            return "; ".join(name_mistakes(accepted.parser, accepted.namespace)) or None
        except SystemExit as exit:
            return f"exit {exit.code}: {stderr.getvalue().strip()}"
    return f"{program} returned without reaching its parser: {stderr.getvalue().strip()}"


# -- a named test runs its command ----------------------------------------------------------

def reached(node: str) -> tuple[set[str], set[str]]:
    """The strings and the names that the test ``node`` reaches: its own, its decorators', and
    those of the module-level functions, constants and fixtures it uses, transitively (plus the
    last part of each module its file imports from, as a name)."""
    path, *names = node.split("::")
    tree = ast.parse((ROOT / path).read_text())
    defined: dict[str, ast.AST] = {}
    imported: set[str] = set()
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined[statement.name] = statement
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                defined.update((n.id, statement) for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(statement, ast.ImportFrom):
            imported.add((statement.module or "").split(".")[-1])
    scope: ast.AST = tree
    for name in (n.split("[")[0] for n in names):
        scope = next(d for d in getattr(scope, "body", []) if getattr(d, "name", None) == name)
    strings, seen, todo = set(), {id(scope)}, [scope]
    words = set(imported)
    while todo:
        for sub in ast.walk(todo.pop()):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                strings.add(sub.value)
            word = sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else \
                sub.arg if isinstance(sub, ast.arg) else None
            if word is not None:
                words.add(word)
                if word in defined and id(defined[word]) not in seen:
                    seen.add(id(defined[word]))
                    todo.append(defined[word])
    return strings, words


def program_modules() -> dict[str, str]:
    """Each console script of arena_envs/cli.py -> the module it runs."""
    text = (ROOT / "arena_envs" / "cli.py").read_text()
    return dict(re.findall(r'run\("([\w-]+)", "([\w.]+):\w+"', text))


def unrun_parts(node: str, command: str, page: str) -> list[str]:
    """What of ``command`` the test ``node`` never names: its program, or any of its flags (none
    when the test reads the commands of ``page``, the page it is shown on)."""
    strings, words = reached(node)
    argv = argv_of(command)
    if any(Path(page).name in s for s in strings):
        return []
    program = argv[2] if argv[:2] == ["python", "-m"] else Path(argv[1]).name if argv[0] == "python" else argv[0]
    module = program_modules().get(program, program).removesuffix(".py").split(".")[-1]
    named = any(program in s for s in strings) or module in words or any(program.replace("-", "_") in w for w in words)
    flags = [w.split("=")[0] for w in argv if w.startswith("--")]
    pattern = lambda flag: re.compile(rf"(?<![\w-]){re.escape(flag)}(?![\w-])")  # noqa: E731
    missing = [flag for flag in flags if not any(pattern(flag).search(s) for s in strings)]
    return ([] if named else [program]) + missing


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


def flags(argv: list[str]) -> list[str]:
    return [word.split("=")[0] for word in argv if word.startswith("--")]


SHOWN = documented_commands()


@pytest.mark.parametrize("command", sorted(c for c in SHOWN if c not in OUTSIDE))
def test_each_documented_command_parses(command):
    """Through its program's real parser: a flag misspelt in a page (``--max-stepz``), an extra
    setup.cfg lacks (``.[grpoo]``) or a program nobody tests (``rm -rf runs``) fails here."""
    assert parse_error(argv_of(command)) is None, f"{SHOWN[command][0]}: {command}\n{parse_error(argv_of(command))}"
    if command in EQUIVALENT:
        instead = argv_of(EQUIVALENT[command][0])
        assert instead[:1] == argv_of(command)[:1] or instead[:2] == ["python", "-m"], "the same program"
        assert parse_error(instead) is None, parse_error(instead)


def test_each_named_test_runs_its_command():
    """A named test names the command's program and each of its flags (or what ``EQUIVALENT``
    says it runs instead), or reads the commands of the command's page."""
    unrun = []
    for command, (page, node) in SHOWN.items():
        node = node or TESTED_BY.get(command)
        if node is not None:
            missing = unrun_parts(node, EQUIVALENT.get(command, (command,))[0], page)
            unrun += [f"{page}: {command}\n    {node} never names {missing}"] if missing else []
    assert not unrun, "a named test does not run its command (run it, or state what it runs in EQUIVALENT):\n" + \
        "\n".join(unrun)
    assert set(EQUIVALENT) <= set(SHOWN) and all(len(why.split()) >= 5 for _, why in EQUIVALENT.values())


def test_the_audit_mutants_fail_the_checks(tmp_path):
    """The three mutants issue 34's audit passed: each is caught now."""
    assert "--max-stepz" in parse_error(["arena-train", "TreasureHunt-v0", "--algo", "sft", "--out", "runs/sft",
                                         "--max-stepz", "2"])
    assert "no extra 'grpoo'" in parse_error(["pip", "install", "-e", ".[grpoo]", "-c", "constraints.txt"])
    assert "no program 'rm'" in parse_error(["rm", "-rf", "runs"])
    assert unrun_parts(HERE + "test_make_test_is_what_ci_runs", "arena-bench --json runs/bench.json", "x.md") == \
        ["arena-bench", "--json"]


def test_the_names_a_command_holds_are_read_as_its_program_reads_them():
    """Issue 43's audit: a misspelt name among a command's positional arguments (a scenario, a ladder's
    seat, arena-eval's agent) passed, since every parser takes any string there; each fails now, with
    the program's own words."""
    assert "did you mean 'team_capture_v0'" in parse_error(["arena-train", "team_captur_v0", "--out", "runs/league"])
    assert "'scriptd'" in parse_error(["arena-eval", "--ladder", "random", "scripted", "pretrained",
                                       "pretrained+scriptd", "--games", "200", "--out", "runs/ladder"])
    assert "names 3 seats" in parse_error(["arena-eval", "--ladder", "scripted", "random+random+scripted"])
    assert "Foragin" in parse_error(["arena-eval", "runs/lean", "Foragin-v0", "--episodes", "200"])
    assert "'scriptd' is no baseline" in parse_error(["arena-eval", "scriptd", "Foraging-v0"])
    assert "crafting" in parse_error(["arena-eval", "pretrained:crafting", "Foraging-v0"])  # plays another scenario
    assert "treasure_hnt" in parse_error(["arena-serve", "treasure_hnt", "--port", "8100"])
    assert "TreasureHunt" in parse_error(["arena-agent", "arena_envs/TreasureHnt-v0", "--agent", "scripted"])
    assert "Crafting" in parse_error(["arena-view", "--play", "pretrained", "Crafing-v0", "--export", "site"])
    for command in ("arena-train team_capture_v0 --out runs/league",
                    "arena-eval --ladder random scripted pretrained pretrained+scripted --games 200 --out runs/ladder",
                    "arena-view --play pretrained Crafting-v0 --episodes 1 --export site"):
        assert parse_error(argv_of(command)) is None, command


@pytest.mark.parametrize("command", sorted(RUN_HERE))
def test_documented_command_runs_at_small_scale(command, tmp_path):
    """The same program with every documented flag (smaller values, and maybe ``--quiet``); what
    it is told to write (``--out``, ``--json``) is written."""
    argv = RUN_HERE[command]
    assert argv[0] == command.split()[0], "the small run must use the documented program"
    assert set(flags(argv_of(command))) <= set(flags(argv)), "the small run must pass every documented flag"
    done = subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr[-3000:]
    for flag in {"--out", "--json"} & set(argv):
        assert (tmp_path / argv[argv.index(flag) + 1]).exists(), f"{flag} {argv[argv.index(flag) + 1]} not written"


def requirement_names(lines: str) -> set[str]:
    return {re.split(r"[\s;<>=!~\[]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")
            for line in lines.splitlines() if line.strip() and not line.strip().startswith("#")}


def test_each_documented_install_is_in_what_make_installs():
    """``make test`` installs the checkout with the extras its recipe names (into the venv this
    suite runs in): each documented ``pip install -e '.[...]'`` gets no package that install lacks,
    with the same constraints."""
    recipe = subprocess.run(["make", "-n", "-B", ".venv/.installed"], cwd=ROOT, capture_output=True, text=True).stdout
    installed = re.search(r"pip install -c constraints\.txt (?:--find-links \S+ )?-e '\.\[([\w,]+)\]'", recipe)
    assert installed, recipe
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    base = requirement_names(config["options"]["install_requires"])
    made = base.union(*(requirement_names(config["options.extras_require"][e]) for e in installed[1].split(",")))
    documented = [argv_of(c) for c in SHOWN if c.startswith("pip install -e ")]
    assert len(documented) >= 3
    for argv in documented:
        assert parse_error(argv) is None
        wanted = re.fullmatch(r"\.\[([\w,]+)\]", argv[argv.index("-e") + 1])[1].split(",")
        packages = base.union(*(requirement_names(config["options.extras_require"][e]) for e in wanted))
        assert packages <= made, f"{' '.join(argv)} installs {sorted(packages - made)}, which make does not"
        assert "-c" not in argv or argv[argv.index("-c") + 1] == "constraints.txt"


def test_the_serving_guide_command_serves_with_its_key_and_difficulty():
    """arena-serve treasure_hunt --port P --env-kwarg difficulty=medium --api-key "$KEY", as the
    serving guide starts it: no key, no reset; with it, a medium hunt."""
    import gymnasium as gym
    import requests

    import arena_envs  # noqa: F401  (registers the envs)

    medium = gym.make("arena_envs/TreasureHunt-v0", difficulty="medium").reset(seed=1)[1]["optimal_path_length"]
    assert medium != gym.make("arena_envs/TreasureHunt-v0").reset(seed=1)[1]["optimal_path_length"]
    port, key = free_port(), "k3y-from-the-shell"
    server = subprocess.Popen([str(BIN / "arena-serve"), "treasure_hunt", "--port", str(port), "--env-kwarg",
                               "difficulty=medium", "--api-key", key, "--log-level", "warning"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                requests.get(url + "/health", timeout=2)
                break
            except requests.ConnectionError:
                assert server.poll() is None and time.monotonic() < deadline, "arena-serve did not start"
                time.sleep(0.3)
        assert requests.post(url + "/reset", json={"seed": 1}, timeout=30).status_code == 401
        answer = requests.post(url + "/reset", json={"seed": 1}, headers={"X-API-Key": key}, timeout=30)
        assert answer.ok, answer.text
        assert answer.json()["observation"]["info"]["optimal_path_length"] == medium  # not the default easy hunt

    finally:
        server.terminate()
        server.wait(timeout=30)


def test_make_test_is_what_ci_runs():
    """`make test` is the suite this file belongs to: CI's script runs exactly that."""
    assert "make test" in (ROOT / ".ci" / "run").read_text().splitlines()
    recipe = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "-m pytest" in recipe and "ruff check" in recipe


def test_the_llm_quickstart_runs_against_the_scripted_server(tmp_path):
    """The LLM quickstart's two commands: the scripted model server, then arena-agent through the real client."""
    port = free_port()
    with serving([sys.executable, "-m", "arena_envs.llm.server", "--port", str(port)],
                 f"http://127.0.0.1:{port}/v1/models", timeout=60):
        done = subprocess.run([str(BIN / "arena-agent"), "arena_envs/TreasureHunt-v0", "--base-url",
                               f"http://127.0.0.1:{port}/v1", "--model", "scripted-hermes", "--episodes", "2",
                               "--out", "runs/hunt", "--quiet"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "runs" / "hunt" / "transcripts.jsonl").read_text().count("\n") == 2
