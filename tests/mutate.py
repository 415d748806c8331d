"""``make mutate``: mutation testing (mutmut) of the modules that hold the project's promises.

    python tests/mutate.py [MODULE ...]       # all of MODULES when none is named
    python tests/mutate.py --every 5 jail     # a sample: one mutant in 5, drawn at random (seed SEED)
    python tests/mutate.py --every 5 --seed 7 jail

Each module is mutated alone, in ``build/mutate/<module>/`` (mutmut's copy of the checkout, its
``mutants/``), and each of its mutants is run against only the tests named for it in
``MODULES`` (of those, mutmut runs the ones that call the mutated function), so that a run
fits on 2 cores. A subprocess of a test (a server, a reader process) imports the mutated copy
too: ``PYTHONPATH`` points at it. A re-run keeps the results of unchanged functions and
runs its survivors again (tests may have been added since); after a module changed (a
merge), ``rm -rf build/mutate/<module>`` starts it afresh.

A sample (``--every N``) is drawn at random, with a fixed seed, from all the module's mutants
at once: each function is sampled in proportion to its mutants, small ones included (a sample
taken within each function, as before, never reached the functions with fewer than N).

It prints, per module, how many mutants were judged and the kill rate (killed / (killed +
survived); timeouts count as killed, as mutmut counts them), and keeps in
``build/mutate/<module>/``: ``results.json`` (the seed, the sample and each sampled mutant's
verdict, to re-check a rate), ``survivors.txt`` (``mutmut show NAME`` in that folder shows a
diff) and ``mutmut.log``, mutmut's own output.
"""

from __future__ import annotations

import json
import os
import random
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
    # the tool-call parsers, each against the tests of what it reads (the linear-time bounds are in
    # DESELECT: a module's scanner has references it is checked against, character by character)
    "decision": (["arena_envs/tools/decision.py"],
                 ["tests/test_tools_decision.py", "tests/test_parsers_linear.py", "tests/test_parsers_messages.py",
                  "tests/test_toollayer_hardening.py", "tests/test_tool_call_wrapper.py", "tests/test_llm_parsers.py"]),
    "parsers": (["arena_envs/llm/parsers.py"],
                ["tests/test_llm_parsers.py", "tests/test_parsers_linear.py", "tests/test_parsers_messages.py",
                 "tests/test_llm_chat_fuzz.py"]),
    # (not sandbox_worker.py: it runs inside the jail, isolated from site-packages, where the mutated
    # copy's import of mutmut fails and every test with it)
    "jail": (["arena_envs/tools/sandbox.py", "arena_envs/tools/sandbox_jail.py"],
             ["tests/test_sandbox.py", "tests/test_sandbox_attacks.py", "tests/test_sandbox_round3.py"]),
}


# tests left out of a module's runs: slow, and holding no promise of that module that a faster test
# does not hold too (the pool's 256 ids on 16 jails: 13 s a run, its pool calls are also made on worlds;
# the jail's third memory hoard)
DESELECT: dict[str, list[str]] = {
    # the real model's game (a minute): the other MCP tests make the same calls through the guard
    "serve_guard": ["tests/test_serve_mcp_http.py::test_the_real_smollm2_plays_a_hunt_through_a_plain_mcp_client"],
    "pool": ["tests/test_stateful_tools.py::test_256_ids_on_16_sandboxes_match_solo_runs_and_never_see_each_other"],
    # the parsers' time bounds (3 s a parser: every text at 40 KB and 200 KB) and the megabyte benchmark (6 s)
    **dict.fromkeys(("decision", "parsers"), [
        "tests/test_parsers_linear.py::test_every_parser_reads_each_kind_of_hostile_text_in_time_linear_in_its_length",
        "tests/test_llm_parsers.py::test_a_megabyte_of_adversarial_braces_costs_about_what_well_formed_json_costs"]),
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


SEED = 0  # the sample's seed: the same sample each run, so that a rate can be re-checked
# a filter no mutant's name matches: mutmut makes the mutants, then stops without running one
NO_MUTANT = "make-the-mutants-only"
KILLED = ("killed", "timeout")  # mutmut counts a timeout as killed; so do we


def sample(names: list[str], every: int, seed: int = SEED) -> list[str]:
    """About one in ``every`` of ``names``, drawn at random with ``seed`` over all of them (a
    function is sampled in proportion to its mutants, small ones too), sorted; all for 1."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"--every must be a positive integer, got {every!r}")
    ordered = sorted(names)
    if every == 1 or not ordered:
        return ordered
    return sorted(random.Random(seed).sample(ordered, max(1, round(len(ordered) / every))))


def statuses(work: Path, env: dict[str, str]) -> dict[str, str]:
    """Every mutant of ``work`` and mutmut's verdict on it ("killed", "survived", "not checked", ...)."""
    listed = subprocess.run([str(MUTMUT), "results", "--all", "true"], cwd=work, env=env, capture_output=True,
                            text=True).stdout
    found = {}
    for line in listed.splitlines():
        name, colon, status = line.strip().rpartition(": ")
        if colon and "__mutmut_" in name:
            found[name] = status
    return found


def tally(verdicts: dict[str, str]) -> dict[str, int]:
    """Counts of ``verdicts`` (mutant -> status): judged, killed (timeouts among them), survived, no tests."""
    values = list(verdicts.values())
    killed = sum(values.count(k) for k in KILLED)
    return {"sampled": len(values), "judged": killed + values.count("survived"), "killed": killed,
            "timeout": values.count("timeout"), "survived": values.count("survived"),
            "no_tests": values.count("no tests")}


def rate(counts: dict[str, int]) -> float:
    return counts["killed"] / max(1, counts["judged"])


def run(module: str, every: int = 1, seed: int = SEED) -> dict[str, int]:
    """Mutate ``module`` in its work directory (one mutant in ``every``, drawn with ``seed``);
    the counts of :func:`tally` for the sample, and ``total``, the module's mutants."""
    files, tests = MODULES[module]
    work = ROOT / "build" / "mutate" / module
    work.mkdir(parents=True, exist_ok=True)
    for name in ("arena_envs", "tests", *ALSO_COPY):
        link = work / name
        if not link.is_symlink():
            link.symlink_to(ROOT / name)
    (work / "setup.cfg").write_text(setup_cfg(files, tests, DESELECT.get(module, [])))
    # made before mutmut starts: a folder missing when Python starts is never searched for imports
    # (its finder is cached as None), and the checkout's own package would be tested instead
    (work / "mutants").mkdir(exist_ok=True)
    # the work directory is not the checkout: mutmut's copy is what every process imports
    env = {**os.environ, "PYTHONPATH": str(work / "mutants")}
    with (work / "mutmut.log").open("w") as log:  # its progress spinner, kept out of the table
        # the mutants of today's code (mutmut keeps the verdicts of functions that did not change)
        # and which tests reach each; it stops at the filter, having run none
        subprocess.run([str(MUTMUT), "run", NO_MUTANT], cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.write(f"\n[mutate.py] the AssertionError above is expected: no mutant matches {NO_MUTANT!r}\n")
    every_mutant = statuses(work, env)
    if not every_mutant:  # e.g. a test that fails before any mutant: mutmut makes none
        tail = (work / "mutmut.log").read_text().replace("\r", "\n").splitlines()[-15:]
        print(f"mutate.py: mutmut made no mutants of {module}:", *tail, sep="\n", file=sys.stderr)
        return {"total": 0, **tally({})}
    chosen = sample(list(every_mutant), every, seed)
    # the survivors too: judged by the tests of their day, judged again by today's
    todo = [name for name in chosen if every_mutant[name] in ("not checked", "survived")]
    if todo:
        with (work / "mutmut.log").open("a") as log:
            done = subprocess.run([str(MUTMUT), "run", "--max-children", "2", *todo], cwd=work, env=env, stdout=log,
                                  stderr=subprocess.STDOUT)
        if done.returncode != 0:
            tail = (work / "mutmut.log").read_text().replace("\r", "\n").splitlines()[-15:]
            print(f"mutate.py: mutmut stopped on {module} (exit {done.returncode}):", *tail, sep="\n",
                  file=sys.stderr)
    verdicts = {name: status for name, status in statuses(work, env).items() if name in set(chosen)}
    counts = {"total": len(every_mutant), **tally(verdicts)}
    (work / "results.json").write_text(json.dumps(
        {"module": module, "files": files, "tests": tests, "every": every, "seed": seed, **counts,
         "kill_rate": round(rate(counts), 4), "verdicts": verdicts}, indent=1) + "\n")
    (work / "survivors.txt").write_text("".join(f"{n}\n" for n, status in verdicts.items() if status == "survived"))
    return counts


def main(names: list[str]) -> int:
    every, seed = 1, SEED
    while names[:1] in (["--every"], ["--seed"]):
        if len(names) < 2 or not names[1].isdigit():
            print(f"mutate.py: {names[0]} takes a number", file=sys.stderr)
            return 2
        if names[0] == "--every":
            every = int(names[1])
        else:
            seed = int(names[1])
        names = names[2:]
    try:
        sample([], every)  # refused now, not after a module's run
    except ValueError as error:
        print(f"mutate.py: {error}", file=sys.stderr)
        return 2
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
        rows.append((module, run(module, every, seed), time.monotonic() - start))
    print()
    print(table(rows, every, seed))
    return 0


def table(rows: list[tuple[str, dict[str, int], float]], every: int, seed: int) -> str:
    """The report: per module, the mutants sampled of all, how many were judged and the kill rate."""
    lines = [f"a sample: one mutant in {every}, drawn at random with seed {seed} (build/mutate/<module>/"
             f"results.json lists them)\n" if every > 1 else "",
             "| module | mutants | sampled | judged | killed (timed out) | survived | no tests | kill rate | minutes |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for module, counts, seconds in rows:
        lines.append(f"| {module} | {counts['total']} | {counts['sampled']} | {counts['judged']} | {counts['killed']} "
                     f"({counts['timeout']}) | {counts['survived']} | {counts['no_tests']} | "
                     f"{rate(counts):.1%} | {seconds / 60:.1f} |")
    return "\n".join(line for line in lines if line)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
