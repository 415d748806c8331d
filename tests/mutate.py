"""``make mutate``: mutation testing (mutmut) of the modules that hold the project's promises.

    python tests/mutate.py [MODULE ...]       # all of MODULES when none is named
    python tests/mutate.py --every 5 jail     # a sample: the mutants whose number is a multiple of 5 (2, 10, 20)

Each module is mutated alone, in ``build/mutate/<module>/`` (mutmut's copy of the checkout, its
``mutants/``), and each of its mutants is run against only the tests named for it in
``MODULES`` (of those, mutmut runs the ones that call the mutated function), so that a run
fits on 2 cores. A subprocess of a test (a server, a reader process) imports the mutated copy
too: ``PYTHONPATH`` points at it. A re-run keeps the results of unchanged functions and
runs its survivors again (tests may have been added since); after a module changed (a
merge), ``rm -rf build/mutate/<module>`` starts it afresh.

It prints the kill rate of each module (killed / (killed + survived); timeouts count as
killed, as mutmut counts them) and writes the survivors of each module to
``build/mutate/<module>/survivors.txt`` (``mutmut show NAME`` in that folder shows a diff);
mutmut's own output is in ``build/mutate/<module>/mutmut.log``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTMUT = Path(sys.executable).with_name("mutmut")
# what a copied checkout needs besides the package and the tests (pages and configs some tests read)
ALSO_COPY = ("docs", "training", "wrappers", "README.md", "Makefile", "constraints.txt", "CHANGELOG.md", ".ci")

# module -> (the files mutated, the fast tests that hold its promises)
MODULES: dict[str, tuple[list[str], list[str]]] = {
    "names": (["arena_envs/names.py"], ["tests/test_names.py", "tests/test_names_cli.py", "tests/test_cli_errors.py"]),
    "transcripts": (["arena_envs/llm/transcripts.py"],
                    ["tests/test_transcript_rules.py", "tests/test_llm_transcripts.py"]),
    "pool": (["arena_envs/tools/pool.py", "arena_envs/tools/resource_pool.py"],
             ["tests/test_tool_pool.py", "tests/test_pool_hardening.py", "tests/test_pool_properties.py",
              "tests/test_stateful_tools.py", "tests/test_seed_tool_system.py", "tests/test_pool_api.py"]),
    "serve_guard": (["arena_envs/serve/guard.py", "arena_envs/serve/reading.py"],
                    ["tests/test_serve_hostile.py", "tests/test_serve_server.py", "tests/test_serve_lockout.py",
                     "tests/test_serve_frames.py", "tests/test_serve_guard_answers.py",
                     "tests/test_serve_guard_edges.py", "tests/test_serve_reader.py",
                     # MCP's streamable HTTP behind the guard: its event streams listen for the client's
                     # disconnect, which the guard's replay of the body must pass on (not the body again)
                     "tests/test_serve_mcp_http.py"]),
    # (not sandbox_worker.py: it runs inside the jail, isolated from site-packages, where the mutated
    # copy's import of mutmut fails and every test with it)
    "jail": (["arena_envs/tools/sandbox.py", "arena_envs/tools/sandbox_jail.py"],
             ["tests/test_sandbox.py", "tests/test_sandbox_attacks.py"]),
}


# tests left out of a module's runs: slow, and holding no promise of that module that a faster test
# does not hold too (the pool's 256 ids on 16 jails: 13 s a run, its pool calls are also made on worlds;
# the jail's third memory hoard)
DESELECT: dict[str, list[str]] = {
    # the real model's game (a minute): the other MCP tests make the same calls through the guard
    "serve_guard": ["tests/test_serve_mcp_http.py::test_the_real_smollm2_plays_a_hunt_through_a_plain_mcp_client"],
    "pool": ["tests/test_stateful_tools.py::test_256_ids_on_16_sandboxes_match_solo_runs_and_never_see_each_other"],
    # 800,000 files until the memory cgroup says no (the memfd and shared-memory hoards reach it in a second)
    "jail": ["tests/test_sandbox_attacks.py::test_the_jail_as_a_whole_is_bounded_by_its_memory_limit"
             "[kernel memory of many files]"],
}


# A mutant that deadlocks (an await never woken) uses no CPU, so mutmut's CPU-time limit never ends
# it: pytest-timeout does, and that test fails (the slowest of these tests takes ~15 s alone).
TEST_TIMEOUT = 90


def setup_cfg(files: list[str], tests: list[str], deselect: list[str] = ()) -> str:
    """The work directory's setup.cfg: mutmut's section, and pytest's without the notebook plugin."""
    lines = "\n    ".join
    deselected = "".join(f"\n    --deselect\n    {test}" for test in deselect)
    return f"""[mutmut]
source_paths = arena_envs
only_mutate =
    {lines(files)}
also_copy =
    {lines(ALSO_COPY)}
pytest_add_cli_args =
    -p
    no:cacheprovider
    -p
    no:nbmake{deselected}
pytest_add_cli_args_test_selection =
    {lines(tests)}
timeout_multiplier = 5
timeout_constant = 30

[tool:pytest]
timeout = {TEST_TIMEOUT}
timeout_method = thread
"""


def sample(every: int) -> list[str]:
    """mutmut's names of every ``every``-th mutant (1, 2, 5, 10 or 20): those whose number is a
    multiple of it, in every function (a sample spread over the whole module, the same each run)."""
    if every not in (1, 2, 5, 10, 20):
        raise ValueError(f"--every must be 1, 2, 5, 10 or 20, got {every}")
    if every == 1:
        return []
    if every == 20:  # (mutmut's patterns are globs: an even tens digit, then a 0)
        return ["*__mutmut_*[02468]0"]
    return [f"*__mutmut_*[{''.join(str(d) for d in range(10) if d % every == 0)}]"]


def run(module: str, every: int = 1) -> dict[str, int]:
    """Mutate ``module`` in its work directory (every ``every``-th mutant); mutmut's counts of its mutants."""
    files, tests = MODULES[module]
    work = ROOT / "build" / "mutate" / module
    work.mkdir(parents=True, exist_ok=True)
    for name in ("arena_envs", "tests", *ALSO_COPY):
        link = work / name
        if not link.is_symlink():
            link.symlink_to(ROOT / name)
    (work / "setup.cfg").write_text(setup_cfg(files, tests, DESELECT.get(module, [])))
    again = (work / "mutants").is_dir()  # a re-run: mutmut keeps earlier results
    # made before mutmut starts: a folder missing when Python starts is never searched for imports
    # (its finder is cached as None), and the checkout's own package would be tested instead
    (work / "mutants").mkdir(exist_ok=True)
    # the work directory is not the checkout: mutmut's copy is what every process imports
    env = {**os.environ, "PYTHONPATH": str(work / "mutants")}
    with (work / "mutmut.log").open("w") as log:  # its progress spinner, kept out of the table
        done = subprocess.run([str(MUTMUT), "run", "--max-children", "2", *sample(every)], cwd=work, env=env,
                              stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:  # e.g. a test that fails before any mutant: mutmut tests none
        tail = (work / "mutmut.log").read_text().replace("\r", "\n").splitlines()[-15:]
        print(f"mutate.py: mutmut stopped on {module} (exit {done.returncode}):", *tail, sep="\n", file=sys.stderr)
    if again and survived(work, env):  # judged by the tests of their day: judged again by today's
        with (work / "mutmut.log").open("a") as log:
            subprocess.run([str(MUTMUT), "run", "--max-children", "2", *survived(work, env)], cwd=work, env=env,
                           stdout=log, stderr=subprocess.STDOUT)
    subprocess.run([str(MUTMUT), "export-cicd-stats"], cwd=work, env=env, check=True, capture_output=True)
    stats = json.loads((work / "mutants" / "mutmut-cicd-stats.json").read_text())
    (work / "survivors.txt").write_text("".join(f"{name}\n" for name in survived(work, env)))
    return stats


def survived(work: Path, env: dict[str, str]) -> list[str]:
    """The names of the mutants that survived, as mutmut has them in ``work``."""
    listed = subprocess.run([str(MUTMUT), "results"], cwd=work, env=env, capture_output=True, text=True).stdout
    return [line.split(":")[0].strip() for line in listed.splitlines() if line.strip().endswith(": survived")]


def rate(stats: dict[str, int]) -> float:
    killed = stats.get("killed", 0) + stats.get("timeout", 0)
    return killed / max(1, killed + stats.get("survived", 0))


def main(names: list[str]) -> int:
    every = 1
    if names[:1] == ["--every"] and len(names) > 1 and names[1].isdigit():
        every, names = int(names[1]), names[2:]
        sample(every)  # refused now, not after a module's run
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        print(f"mutate.py: no module {unknown}; one of {', '.join(MODULES)}", file=sys.stderr)
        return 2
    if shutil.which(str(MUTMUT)) is None:
        print("mutate.py: mutmut is not installed: pip install -e '.[dev]'", file=sys.stderr)
        return 2
    rows = []
    for module in names or list(MODULES):
        start = time.monotonic()
        stats = run(module, every)
        rows.append((module, stats, time.monotonic() - start))
    if every > 1:
        print(f"\na sample: the mutants whose number is a multiple of {every} (the others are 'not checked')")
    print("\n| module | mutants | killed | survived | no tests | other | kill rate | minutes |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for module, stats, seconds in rows:
        killed = stats.get("killed", 0) + stats.get("timeout", 0)
        other = stats.get("total", 0) - killed - stats.get("survived", 0) - stats.get("no_tests", 0)
        print(f"| {module} | {stats.get('total', 0)} | {killed} | {stats.get('survived', 0)} | "
              f"{stats.get('no_tests', 0)} | {other} | {rate(stats):.0%} | {seconds / 60:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
