"""``PythonSandboxEnv``: ordinary Python in a jail, its limits, its backends and its errors (issue 24).

The hostile cases are in test_sandbox_attacks.py; these run on the real backend too.
"""

from __future__ import annotations

import os
import re
import shutil
import sys

import pytest

from arena_envs.tools import PythonSandboxEnv, SandboxUnavailable, sandbox_jail
from arena_envs.tools.sandbox_jail import Limits, bwrap_options, interpreter_view, worker_command


@pytest.fixture(scope="module")
def sandbox():
    env = PythonSandboxEnv(time_limit=3.0, memory_limit=256 * 2**20, max_output=1000)
    yield env
    env.close()


def test_the_backend_picked_here_is_bubblewrap():
    assert shutil.which("bwrap") and PythonSandboxEnv().backend == "bwrap"


def test_ordinary_python_runs_unrestricted(sandbox):
    code = ("import math, json, re, pickle, subprocess, numpy as np\nfrom collections import Counter\n"
            "class Point:\n    def __init__(self, x):\n        self.x = x\n"
            "words = re.findall(r'\\w+', 'a b a c')\n"
            "print(json.dumps(Counter(words)), math.isqrt(17), pickle.loads(pickle.dumps(Point(3))).x,\n"
            "      int(np.arange(4).sum()), subprocess.run(['echo', 'hi'], capture_output=True, text=True).stdout)")
    assert sandbox.run(code) == '{"a": 2, "b": 1, "c": 1} 4 3 6 hi\n\n'


def test_output_is_everything_printed_in_order_and_capped(sandbox):
    code = ("import os, sys, subprocess\nprint('a')\nos.write(1, b'b\\n')\nprint('c', file=sys.stderr)\n"
            "subprocess.run(['echo', 'd'])\nsys.stdout.write('e')")
    assert sandbox.run(code) == "a\nb\nc\nd\ne"
    out = sandbox.run("print('a' * 5000)")
    assert out == "a" * 1000 + "\n[output truncated to 1000 characters]"
    assert sandbox.run("print('é' * 2000)").startswith("é" * 1000 + "\n[output truncated")


def test_errors_read_like_python_and_the_session_goes_on(sandbox):
    sandbox.run("kept = 42")
    assert sandbox.run("1 / 0") == ('Traceback (most recent call last):\n  File "<sandbox>", line 1, in <module>\n'
                                    "ZeroDivisionError: division by zero\n")
    assert "RecursionError" in sandbox.run("def f(n):\n    return f(n + 1)\nf(0)")
    assert "SyntaxError" in sandbox.run("def (")
    assert "SystemExit: 3" in sandbox.run("raise SystemExit(3)")
    assert sandbox.run("print(kept)") == "42\n"


def test_an_infinite_loop_is_stopped_at_the_time_limit_and_the_session_restarts(sandbox):
    sandbox.run("kept = 1")
    out = sandbox.run("print('before')\nwhile True:\n    pass")
    assert out == ("before\nTimeoutError: the code ran for more than 3 s and was stopped; "
                   "the session was restarted, its variables are lost\n")
    assert "NameError" in sandbox.run("print(kept)")
    assert sandbox.run("print('alive')") == "alive\n"


def test_memory_is_limited(sandbox):
    assert sandbox.run("x = bytearray(400 * 2**20)").endswith("MemoryError\n")
    assert "Unable to allocate" in sandbox.run("import numpy\nx = numpy.ones(10**9)")
    assert sandbox.run("print(6 * 7)") == "42\n"


def test_a_process_that_dies_is_reported_with_its_signal_or_code(sandbox):
    assert sandbox.run("import os; os.kill(os.getpid(), 6)") == (
        "Error: the sandbox process was killed by SIGABRT; the session was restarted, its variables are lost\n")
    assert sandbox.run("print('bye'); import os; os._exit(3)") == (
        "bye\nError: the sandbox process ended (exit code 3); the session was restarted, its variables are lost\n")
    assert sandbox.run("print(1)") == "1\n"


def test_reset_gives_a_fresh_process_in_a_fresh_jail(sandbox):
    sandbox.run("import os\nx = 1\nopen('/work/f', 'w').write('x')")
    before = sandbox._jail.process.pid
    sandbox.reset()
    assert sandbox.run("import os\nprint(os.listdir('/work'), 'x' in dir())") == "[] False\n"
    assert sandbox._jail.process.pid != before


def test_the_minor_findings_of_the_issue():
    # time_limit=inf: no limit (it raised OverflowError); memory_limit=2**64: no limit (every step
    # was "out of memory")
    for env in (PythonSandboxEnv(time_limit=float("inf")), PythonSandboxEnv(memory_limit=2**64)):
        try:
            assert env.run("print(sum(range(10)))") == "45\n"
        finally:
            env.close()
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(ValueError, match="max_output must be an integer of at least 1"):
            PythonSandboxEnv(max_output=bad)


@pytest.mark.parametrize(("option", "value", "words"), [
    ("time_limit", 0, "time_limit must be a positive number"),
    ("time_limit", float("nan"), "time_limit"),
    ("time_limit", "5", "time_limit"),
    ("memory_limit", 1000, "memory_limit"),
    ("max_code", 0, "max_code"),
    ("max_processes", 2, "max_processes"),
    ("disk_limit", 10, "disk_limit"),
    ("backend", "chroot", "backend must be one of bwrap, unsafe-no-isolation or None"),
    ("backend", "docker", "backend must be one of bwrap, unsafe-no-isolation or None"),
    # issue 34: a raw OSError at the first step, and a jail that never started
    ("max_processes", 2**40, "max_processes must be at most 4,194,304, got 1,099,511,627,776"),
    ("disk_limit", 2**70, "disk_limit must be at most 9,223,372,036,854,775,807"),
])
def test_bad_configuration_is_a_clear_error(option, value, words):
    with pytest.raises(ValueError, match=words):
        PythonSandboxEnv(**{option: value})


def test_bad_input():
    env = PythonSandboxEnv(max_code=10)
    with pytest.raises(TypeError, match="string"):
        env.run(3)
    assert env.run("x" * 11).startswith("Error: the code is 11 characters long")
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.run("1")


def test_without_a_backend_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    sandbox_jail.bwrap_problem.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable, match=r"bwrap: bubblewrap is not installed \(`apt-get install "
                                                     r"bubblewrap`\)\)\. To fix: install bubblewrap"):
            PythonSandboxEnv()
    finally:
        sandbox_jail.bwrap_problem.cache_clear()


def test_the_bwrap_command_names_no_host_path_and_shows_only_the_interpreter():
    """bwrap's options (which name host paths) come on a descriptor: its command line, the
    jail's /proc/1/cmdline, has jail paths only."""
    view = interpreter_view()
    limits = Limits(memory=2**28, processes=32, disk=2**24)
    options = bwrap_options(limits, 5, 6, "/tmp", own_devices=True)
    for flag in ("--unshare-all", "--die-with-parent", "--new-session", "--clearenv", "--cap-drop", "--seccomp"):
        assert flag in options
    binds = [(options[i + 1], options[i + 2]) for i, a in enumerate(options) if a == "--ro-bind"]
    assert all(host.startswith("/tmp/") for host, _ in binds)  # the jail's own overlays and empty file
    assert {inside for _, inside in binds} >= {"/usr", "/sandbox/site-packages-2"}
    assert ("--bind" not in options) and all(inside != "/" for _, inside in binds)
    command = " ".join(worker_command(limits, 3, 4))
    project = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for host in (project, os.path.realpath(sys.base_prefix), os.path.expanduser("~")):
        assert host not in command or host == "/usr", (host, command)
    assert command.startswith(view.executable) and view.executable.startswith(("/usr/", "/sandbox/"))


def test_the_unsafe_backend_is_explicit_and_warns():
    with pytest.warns(UserWarning, match="no jail"):
        env = PythonSandboxEnv(backend="unsafe-no-isolation")
    try:
        assert env.run("print(6 * 7)") == "42\n"
    finally:
        env.close()


def test_the_arena_bench_rows_are_all_measured():
    from arena_envs import bench

    rows = {name: (rate, unit) for name, rate, unit in bench.run(["--seconds", "0.3", "--only", "sandbox"])}
    assert len(rows) == 19 and all(rate > 0 for rate, _ in rows.values()), rows
    for label in ("bwrap jail", "bwrap jail without memory cgroup and seccomp", "no jail", "subprocess per call"):
        assert rows[f"Sandbox calls, 16 ids: {label}"][1] == "calls/s"
        assert rows[f"Sandbox calls, 16 ids: {label}, p50"][0] <= rows[f"Sandbox calls, 16 ids: {label}, p99"][0]


def test_the_python_blocks_of_the_sandbox_guide_run_and_print_what_they_say():
    import subprocess
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "sandbox.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", page, re.S | re.M)
    outputs = [subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=120)
               for block in blocks]
    assert [o.returncode for o in outputs] == [0, 0], [o.stderr for o in outputs]
    assert outputs[0].stdout.startswith("45\n\nTraceback") and "NameError: name 'x' is not defined" in outputs[0].stdout
    first, second = outputs[1].stdout.split("\n", 1)
    assert first.startswith("/work [") and "'etc'" not in first
    assert "FileNotFoundError: [Errno 2] No such file or directory: '/etc/passwd'" in second


def test_a_jail_that_cannot_start_says_why(monkeypatch):
    monkeypatch.setattr(sandbox_jail, "worker_command", lambda *_: ["/sandbox/no_such_python"])
    env = PythonSandboxEnv()
    try:
        output = env.run("print(1)")
    finally:
        env.close()
    assert output.startswith("bwrap: execvp /sandbox/no_such_python: No such file or directory"), output
    assert output.endswith("Error: the sandbox did not start: it ended (exit code 1); the session was restarted, "
                           "its variables are lost\n")


def test_a_program_that_exits_without_closing_leaves_no_jail_behind():
    import subprocess
    from pathlib import Path

    # max_processes=61 marks this program's jails in the process table
    script = ("from arena_envs.tools import PythonSandboxEnv\nenv = PythonSandboxEnv(max_processes=61)\n"
              "print(env.run('print(1)'), end='')\nenv.reset()\nimport os\nprint(os.getpid())")
    parents = [sandbox_jail.cgroup_parent(c) for c in ("memory", "pids")]  # each jail has cgroups in there
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    ran, pid = done.stdout.split()
    assert ran == "1"
    marked = []
    for process in Path("/proc").iterdir():
        try:
            if process.name.isdigit() and b"--processes\x0061\x00" in (process / "cmdline").read_bytes():
                marked.append(process.name)
        except OSError:
            pass
    assert marked == []
    assert parents[0] is not None
    assert not [group for parent in parents if parent for group in parent.glob(f"arena-sandbox-{pid}-*")]
