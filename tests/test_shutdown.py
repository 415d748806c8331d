"""A run with workers always ends, and saved (issue 42): ``arena-train`` through its console script,
with one shard worker stopped (SIGSTOP: alive but silent) or killed in the middle of the run.

Before, a stopped worker hung the trainer for good (it waited on the worker's pipe with no limit, so
``--max-minutes`` was never looked at again), and a killed one ended the run without its checkpoint
or ``model.zip``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from arena_envs.sharded import ShardedVectorEnv, WorkerError
from arena_envs.training.common import CONFIG_DIR

ARENA_TRAIN = Path(sys.executable).with_name("arena-train")
WORKER_TIMEOUT = 10  # s: how long the trainer waits for a worker's answer (the config's worker_timeout)
# s from the signal to the exit: the worker's timeout, stopping the workers and the learner (a few s), the
# checkpoint and model.zip (seconds), the interpreter's teardown (up to 7 s seen on a loaded 2-core machine)
EXIT_BOUND = 120
STARTUP = 300  # s for the run to import, build its batch and finish its first update on a loaded machine


# -- the sharded batch itself ----------------------------------------------------------------------


@pytest.mark.parametrize("workers", [2, len(os.sched_getaffinity(0)) + 1], ids=["watching-the-pipe", "sleeping-on-it"])
def test_a_stopped_worker_makes_the_step_raise_within_its_reply_timeout_and_is_killed(workers):
    """With a core a process the trainer watches a worker's pipe before sleeping on it, else sleeps at once
    (ShardedVectorEnv._spin): the time limit holds either way."""
    envs = ShardedVectorEnv(4 * workers, workers, scenario="foraging", reply_timeout=2)
    assert bool(envs._spin) is (workers <= len(os.sched_getaffinity(0)))
    envs.reset(seed=0)
    envs.step(envs.action_space.sample())
    worker = envs._processes[1]
    os.kill(worker.pid, signal.SIGSTOP)
    started = time.monotonic()
    lo, hi = envs.bounds[1]
    with pytest.raises(WorkerError, match=rf"worker 1 \(worlds {lo}\.\.{hi - 1}\) hung: it did not answer within 2 s"):
        envs.step(envs.action_space.sample())
    assert time.monotonic() - started < 30  # 2 s, and about 2 s more to stop it (no limit before)
    assert not worker.is_alive() and worker.exitcode == -signal.SIGKILL
    with pytest.raises(RuntimeError, match="hung"):  # the env is closed
        envs.step(envs.action_space.sample())


def test_close_stops_every_stopped_worker_within_one_bound():
    """Stopped workers neither read the close nor die of SIGTERM: each is killed, and the waits for them
    run side by side (about 2 * timeout in all; one after another before: 4 workers, 16 s)."""
    envs = ShardedVectorEnv(10, 5, scenario="foraging")
    envs.reset(seed=0)
    workers = list(envs._processes.values())
    for worker in workers:
        os.kill(worker.pid, signal.SIGSTOP)
    started = time.monotonic()
    envs.close_workers(timeout=2.0)
    assert time.monotonic() - started < 10
    assert [worker.exitcode for worker in workers] == [-signal.SIGKILL] * 4


# -- a training run through arena-train -------------------------------------------------------------


def start_run(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """A Foraging run with 2 workers (this process's shard and one worker process) and the async learner,
    long enough (5 minutes) to be stopped in the middle; in a session of its own, to be cleaned up whole."""
    config = yaml.safe_load((CONFIG_DIR / "ppo" / "foraging.yaml").read_text())
    config.update(worker_timeout=WORKER_TIMEOUT, eval_every=0, async_learner=True, checkpoint_every=10**9)
    config["ppo"].update(n_steps=16, batch_size=256, n_epochs=1)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "run"
    process = subprocess.Popen(
        [str(ARENA_TRAIN), "Foraging-v0", "--config", str(path), "--out", str(out), "--num-workers", "2",
         "--n-envs", "64", "--timesteps", str(10**9), "--max-minutes", "5", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    return process, out


def children(pid: int) -> list[int]:
    """The child processes of ``pid``, oldest first."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]

    def started(child: int) -> int:  # the 22nd field of /proc/PID/stat (after the command's parentheses)
        return int(Path(f"/proc/{child}/stat").read_text().rpartition(")")[2].split()[19])

    return sorted(found, key=started)


def shard_worker(pid: int) -> int:
    """The trainer's shard worker: its oldest child but the resource tracker (the batch, and so its
    worker, is made before the learner process)."""
    for child in children(pid):
        if b"resource_tracker" not in Path(f"/proc/{child}/cmdline").read_bytes():
            return child
    raise AssertionError(f"arena-train (pid {pid}) has no worker process")


def wait_for_first_update(process: subprocess.Popen, out: Path) -> None:
    deadline = time.monotonic() + STARTUP
    progress = out / "progress.csv"
    while not (progress.exists() and len(progress.read_text().splitlines()) >= 2):
        if process.poll() is not None:
            raise AssertionError(f"arena-train ended before its first update: {process.communicate()[1][-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"arena-train did not finish an update in {STARTUP} s")
        time.sleep(0.2)


@pytest.mark.parametrize("fault", [signal.SIGSTOP, signal.SIGKILL], ids=["worker-stopped", "worker-killed"])
def test_run_with_workers_ends_within_a_bound_and_saved_when_a_worker_hangs_or_dies(tmp_path, fault):
    process, out = start_run(tmp_path)
    try:
        wait_for_first_update(process, out)
        os.kill(shard_worker(process.pid), fault)
        signalled = time.monotonic()
        try:
            _, stderr = process.communicate(timeout=EXIT_BOUND)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"arena-train did not exit within {EXIT_BOUND} s of its worker's "
                                 f"{signal.Signals(fault).name}") from None
        assert time.monotonic() - signalled < EXIT_BOUND
        # the run says what happened in one line, and fails
        assert process.returncode == 1, stderr[-3000:]
        what = "hung: it did not answer within 10 s, and was killed" if fault == signal.SIGSTOP else "died"
        assert f"worker 1 (worlds 32..63) {what}" in stderr, stderr[-3000:]
        assert "Traceback" not in stderr, stderr[-3000:]
        # and kept what it had learnt: the checkpoint (for --resume, at least the first update) and model.zip
        [saved] = (out / "checkpoints").glob("ppo_*_steps.pt")
        step = torch.load(saved, weights_only=False)["step"]
        assert step >= 64 * 16, step
        assert (out / "checkpoints" / f"ppo_{step}_steps.zip").is_file()
        assert (out / "model.zip").is_file()
        assert f"stopped at {step:,} steps" in stderr
        # and left no process behind: the worker (stopped or not), the learner and, once they are gone, the
        # resource tracker (it ends when nobody holds its pipe: a process left behind would keep it too)
        assert _left_behind(process.pid, within=30) == []
    finally:  # whatever is left of the run's session (its process group): it, its worker and learner
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.communicate()


def _left_behind(session: int, within: float) -> list[str]:
    """The processes of the run's session (but zombies) still alive ``within`` seconds from now, or none."""
    deadline = time.monotonic() + within
    while True:
        alive = []
        for entry in Path("/proc").iterdir():
            try:
                stat = (entry / "stat").read_text().rpartition(")")[2].split() if entry.name.isdigit() else None
                if stat and int(stat[3]) == session and stat[0] != "Z":  # its session id; not a zombie
                    alive.append(f"{entry.name}: {(entry / 'cmdline').read_bytes()[:200]!r}")
            except OSError:  # it ended meanwhile
                continue
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)
