"""The jail against the third attack round (issue 43): the kernel's per-user counters, CPU
between steps, a cgroup parent that is no cgroup, and the machine's files in ``/proc``.

Each test attacks the real bubblewrap jail the way the issue's adversary did, and failed on
the jail of ``9bc1767``.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from arena_envs.tools import PythonSandboxEnv, SandboxUnavailable, sandbox_jail
from arena_envs.tools.sandbox_jail import JAIL_RLIMITS, JAIL_USER_COUNTERS, JailCgroups, Limits

LIBC = ctypes.CDLL(None, use_errno=True)
FAN_CLASS_NOTIF, FAN_REPORT_FID = 0x0, 0x200
CLOCK_MONOTONIC = 1

# holds as many as it can (up to a most) of each per-user kernel object, and keeps them
HOARD = textwrap.dedent("""
    import ctypes, errno, os, signal
    libc = ctypes.CDLL(None, use_errno=True)
    held = {}

    def hoard(kind, make, most):
        count = 0
        while count < most and make(count) >= 0:
            count += 1
        held[kind] = (count, errno.errorcode.get(ctypes.get_errno(), "?") if count < most else "all")

    hoard("inotify", lambda n: libc.inotify_init1(0), 200)
    hoard("fanotify", lambda n: libc.fanotify_init(0x200, 0), 200)  # FAN_CLASS_NOTIF | FAN_REPORT_FID
    hoard("mq", lambda n: libc.mq_open(f"/hoard-{n}".encode(), os.O_CREAT | os.O_RDWR, 0o600, None), 50)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])  # queued, never delivered
    hoard("signals", lambda n: libc.sigqueue(os.getpid(), int(signal.SIGRTMIN), None), 200_000)
    print(held)
""")


def host_can(make, close) -> int:
    """0 when this process can make one (then closed), else the errno."""
    handle = make()
    if handle < 0:
        return ctypes.get_errno()
    close(handle)
    return 0


def host_timer() -> int:
    timer = ctypes.c_void_p()
    return host_can(lambda: LIBC.timer_create(CLOCK_MONOTONIC, None, ctypes.byref(timer)),
                    lambda _: LIBC.timer_delete(timer))


def host_queue() -> int:
    name = f"/arena-round3-{os.getpid()}".encode()
    LIBC.mq_unlink(name)

    def close(queue: int) -> None:
        LIBC.mq_close(queue)
        LIBC.mq_unlink(name)
    return host_can(lambda: LIBC.mq_open(name, os.O_CREAT | os.O_RDWR, 0o600, None), close)


def test_a_jail_cannot_take_the_host_users_inotify_fanotify_queues_or_signals():
    """The jail's user namespace charges the kernel's per-user counters to the host user that
    made it: one jail holding 128 inotify and fanotify instances, POSIX queues and ~96k queued
    signals made this process's own inotify_init, fanotify_init, mq_open and timer_create fail.
    Now it gets small shares (and no fanotify), and the host's calls work while it holds them."""
    env = PythonSandboxEnv(time_limit=60)
    try:
        held = eval(env.run(HOARD))  # noqa: S307 - the dict the jail printed
        assert held["inotify"] == (JAIL_USER_COUNTERS["max_inotify_instances"], "EMFILE"), held
        assert held["fanotify"] == (0, "EPERM"), held  # refused by seccomp
        assert held["mq"] == (0, "EMFILE"), held  # RLIMIT_MSGQUEUE is 0
        assert held["signals"][1] == "EAGAIN" and held["signals"][0] <= JAIL_RLIMITS["sigpending"], held
        # the jail still holds all it got (its step is over, its session goes on)
        assert env.run("print(sorted(held) == ['fanotify', 'inotify', 'mq', 'signals'])") == "True\n"
        assert host_can(lambda: LIBC.inotify_init1(os.O_CLOEXEC), os.close) == 0
        assert host_can(lambda: LIBC.fanotify_init(FAN_CLASS_NOTIF | FAN_REPORT_FID, os.O_RDONLY), os.close) == 0
        assert host_queue() == 0
        assert host_timer() == 0
    finally:
        env.close()


def test_inotify_still_works_in_the_jail_within_its_share():
    env = PythonSandboxEnv()
    try:
        code = textwrap.dedent("""
            import ctypes, os
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK)
            watches = [libc.inotify_add_watch(fd, f"/work/{n}".encode(), 0x100) for n in range(1000)
                       if os.mkdir(f"/work/{n}") is None]
            ok = [w for w in watches if w >= 0]
            open("/work/0/new", "w").close()
            print(fd >= 0, len(ok), ctypes.get_errno() == 28, len(os.read(fd, 4096)) > 0)  # ENOSPC past its share
        """)
        assert env.run(code) == f"True {JAIL_USER_COUNTERS['max_inotify_watches']} True True\n"
    finally:
        env.close()


# --- CPU between steps -------------------------------------------------------------------------

SPIN = textwrap.dedent("""
    import subprocess, sys, threading
    count = [0]
    def spin():
        while True:
            count[0] += 1
    threading.Thread(target=spin, daemon=True).start()
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    print("left running")
""")


def jail_pids(env: PythonSandboxEnv) -> list[int]:
    """The host pids of every process of ``env``'s jail (bwrap and its descendants)."""
    found, todo = [], [env._jail.process.pid]
    while todo:
        pid = todo.pop()
        found.append(pid)
        for task in os.listdir(f"/proc/{pid}/task"):
            todo += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return found


def cpu_seconds(pids: list[int]) -> float:
    """CPU time the processes ``pids`` (all their threads) have used."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def test_what_a_step_leaves_running_gets_next_to_no_cpu_until_the_next_step():
    """A thread and two processes left spinning by a 0.1 s step burned 5.5 CPU-seconds in 8 s,
    until the session's release. Between steps now the jail gets 0.1% of a CPU; in the next
    step they run again, and the step's own code runs at full speed."""
    env = PythonSandboxEnv(time_limit=20)
    try:
        assert env.run(SPIN) == "left running\n"
        pids = jail_pids(env)
        assert len(pids) >= 5  # bwrap, its init, the worker, two spinners
        before = cpu_seconds(pids)
        time.sleep(2)
        between = cpu_seconds(pids) - before
        assert between < 0.1, f"{between:.2f} CPU-seconds between steps"
        # in a step they run (nothing was killed) ...
        assert env.run("import time\nstart = count[0]\ntime.sleep(0.5)\nprint(count[0] > start, "
                       "[s.poll() for s in spinners])") == "True [None, None]\n"
        # ... and so does the step's own code: a CPU-second of work is done long before the limit
        busy = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 1: pass\nprint('done')"
        assert env.run(busy) == "done\n"
    finally:
        env.close()


def test_a_throttled_jail_is_killed_at_once():
    """Throttled processes still die (a frozen cgroup v1 would not): release takes no CPU period."""
    env = PythonSandboxEnv(time_limit=20)
    try:
        assert env.run(SPIN) == "left running\n"
        pids = jail_pids(env)
        start = time.monotonic()
        env.close()
        assert time.monotonic() - start < 0.9  # under CPU_PERIOD: the kill did not wait for a quota
        assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    finally:
        env.close()


# --- a cgroup parent that is no cgroup ---------------------------------------------------------

ATTEMPT = textwrap.dedent("""
    from arena_envs.tools import PythonSandboxEnv, SandboxUnavailable
    try:
        env = PythonSandboxEnv(max_processes=16, time_limit=30)
    except SandboxUnavailable as error:
        print("refused:", error)
    else:
        print(env.run("import subprocess\\n"
                      "print(len([subprocess.Popen(['sleep', '30']) for _ in range(40)]), 'processes')"))
        env.close()
""")


@pytest.mark.parametrize("controller", ["pids", "memory", "cpu"])
def test_a_cgroup_directory_on_another_filesystem_is_refused(controller):
    """Over a tmpfs mounted where the pids cgroup was, the jail wrote pids.max as a plain file
    and ran 40 processes at max_processes=16 as root: the directory is checked to be a cgroup
    filesystem now (statfs), and without one the sandbox refuses to start."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    own = next((path for _, names, path in (line.split(":", 2) for line in lines) if controller in names.split(",")),
               None)
    if own is not None:  # v1: a tmpfs over the controller's hierarchy, holding this process's cgroup's path
        where = Path("/sys/fs/cgroup") / controller
        make = f"mount -t tmpfs fake {where} && mkdir -p {where / own.lstrip('/')}"
    else:  # v2: a tmpfs over the unified hierarchy, whose cgroup says the controller is delegated
        own = next(path for _, names, path in (line.split(":", 2) for line in lines) if names == "")
        where = Path("/sys/fs/cgroup")
        group = where / own.lstrip("/")
        make = (f"mount -t tmpfs fake {where} && mkdir -p {group} && "
                f"echo 'memory pids cpu' > {group}/cgroup.subtree_control")
    refused = controller if where != Path("/sys/fs/cgroup") else "memory"  # v2: all of them fake, memory first
    user = [] if os.geteuid() == 0 else ["--map-root-user"]
    done = subprocess.run([shutil.which("unshare"), *user, "--mount", "--propagation", "private", "/bin/sh", "-c",
                           f"{make} && exec {sys.executable} -c \"$0\"", ATTEMPT], capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.startswith("refused: "), (done.stdout, done.stderr[-2000:])
    assert f"no writable {refused} cgroup" in done.stdout, done.stdout


def test_a_cgroup_without_its_limit_files_is_refused_and_none_is_made(tmp_path, monkeypatch):
    """A cgroup's limit files are the kernel's: one this process would create bounds nothing."""
    monkeypatch.setattr(sandbox_jail, "cgroup_parent", lambda controller: tmp_path)
    with pytest.raises(SandboxUnavailable, match=r"has no (pids\.max|memory\.max): it is no cgroup"):
        JailCgroups(Limits(memory=2**28, processes=16, disk=2**24))
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == []
    assert list(tmp_path.iterdir()) == []  # and the group's directory is removed


def test_the_cgroup_filesystems_are_told_apart_from_others():
    assert sandbox_jail.filesystem_magic(Path("/proc")) == 0x9FA0  # PROC_SUPER_MAGIC
    assert sandbox_jail.filesystem_magic(Path("/no/such/path")) is None
    for controller in ("memory", "pids", "cpu"):
        parent = sandbox_jail.cgroup_parent(controller)
        assert parent is not None
        assert sandbox_jail.filesystem_magic(parent) in sandbox_jail.CGROUP_MAGIC.values()


# --- /proc -------------------------------------------------------------------------------------

READ_PROC = textwrap.dedent("""
    import os
    def read(name):
        with open(f"/proc/{name}") as file:
            return file.read()
    names = ["meminfo", "stat", "loadavg", "uptime", "sys/kernel/random/boot_id", "vmstat", "zoneinfo",
             "diskstats", "interrupts", "sys/fs/file-nr"]
    print(repr({name: read(name) for name in names if os.path.exists(f"/proc/{name}")}))
""")


def fields(text: str) -> dict[str, str]:
    return {line.split()[0].rstrip(":"): line.split(None, 1)[1] for line in text.splitlines() if line.strip()}


def test_the_jails_proc_shows_none_of_the_machines_state():
    """The jail read the host's meminfo, stat, loadavg, uptime and boot_id, and watched another
    jail's memory in meminfo: those are the jail's own now, and the machine's counters empty."""
    started = time.time()
    watcher, hog = PythonSandboxEnv(memory_limit=2**28, max_output=10**6), PythonSandboxEnv(memory_limit=2**29)
    try:
        seen = eval(watcher.run(READ_PROC))  # noqa: S307 - the dict the jail printed
        host = {name: Path(f"/proc/{name}").read_text() for name in seen}
        assert fields(seen["meminfo"])["MemTotal"] == f"{2**28 // 1024} kB"
        assert fields(seen["meminfo"])["MemAvailable"] == f"{2**28 // 1024} kB"
        assert seen["sys/kernel/random/boot_id"] != host["sys/kernel/random/boot_id"]
        assert int(fields(seen["stat"])["btime"]) >= int(started)  # it booted when it started
        assert len([line for line in seen["stat"].splitlines() if line.startswith("cpu")]) == os.cpu_count() + 1
        assert float(seen["uptime"].split()[0]) < float(host["uptime"].split()[0]) - 1
        assert seen["loadavg"].split()[3] == "1/1"  # the host's: its threads, hundreds
        for name in ("vmstat", "zoneinfo", "diskstats", "interrupts", "sys/fs/file-nr"):
            assert seen.get(name, "") == "", name
        assert watcher.run("import os\nprint(os.cpu_count())") == f"{os.cpu_count()}\n"

        # another jail's memory does not show: its 300 MB move nothing the watcher reads
        before = watcher.run("print(open('/proc/meminfo').read())")
        assert hog.run("hoard = bytearray(300 * 2**20)\nprint(len(hoard[::4096]))") == f"{300 * 256}\n"
        assert watcher.run("print(open('/proc/meminfo').read())") == before
        assert hog.run("print(open('/proc/sys/kernel/random/boot_id').read())") != watcher.run(
            "print(open('/proc/sys/kernel/random/boot_id').read())")
    finally:
        watcher.close()
        hog.close()


def test_the_jails_proc_lists_its_own_processes_only():
    """A fresh procfs for the jail's pid namespace: its own processes, none of the host's."""
    env = PythonSandboxEnv()
    try:
        output = env.run("import os, subprocess\nchild = subprocess.Popen(['sleep', '5'])\n"
                         "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\nchild.kill()")
        assert output == "[1, 2, 3]\n", output  # bwrap's init, the worker, its child
    finally:
        env.close()

