"""The OS sandbox behind :class:`~arena_envs.tools.sandbox.PythonSandboxEnv`: bubblewrap.

A backend turns a :class:`Limits` into the command that starts
:mod:`~arena_envs.tools.sandbox_worker` in a fresh jail, and kills a jail with everything
in it. :func:`pick_backend` checks that ``bwrap`` can run jails here or refuses with what
to install; ``"unsafe-no-isolation"`` runs the worker as a plain child process.

A ``bwrap`` jail (Debian's ``bubblewrap``) has:

* new user, pid, network, ipc, uts and cgroup namespaces (``--unshare-all``), a new session,
  ``--die-with-parent``, uid 1000 without capabilities, and a seccomp filter
  (:data:`SECCOMP_REFUSED`) against the kernel's shared state that namespaces do not cover;
* bounds on the kernel's per-user counters, which a user namespace charges to the host user
  that owns it (the host's own ``inotify_init``, ``mq_open``, ``timer_create`` fail once a jail
  holds them all): :data:`JAIL_RLIMITS` (no POSIX message queue, few queued signals and timers),
  :data:`JAIL_USER_COUNTERS` (inotify) in a user namespace the jail's is nested in, and
  ``fanotify_init`` refused;
* a memory cgroup of its own, so that everything it holds (processes, tmpfs, shared memory,
  memfd, kernel memory) is bounded together, a ``cpu`` cgroup that gives it next to no CPU
  between steps (threads or processes a step left running), and a ``pids`` cgroup as root
  (where ``RLIMIT_NPROC`` does not bind): v2 where the controller is delegated, else v1; each
  checked to be a cgroup filesystem (a directory of another one takes the limit files and
  enforces nothing);
* its own ``/proc`` (its pid namespace's processes only), whose files of the whole machine
  (memory, load, uptime, boot id, counters that move with other jails' work) are the jail's
  own or empty: :data:`PROC_FAKED`, :data:`PROC_EMPTIED`;
* nothing of the host's filesystem but the interpreter, read-only, at neutral paths: each
  host directory it sees (``/usr``, the interpreter's prefix at ``/sandbox/python``, each
  site-packages at ``/sandbox/site-packages-N``) is a read-only overlay made for this jail
  alone, and ``/dev/null`` and the other device files are its own nodes, so no inode of the
  jail is one another jail or the host uses: a lock it takes or a watch it sets reaches
  nobody, and ``mountinfo`` names no host directory (the overlays are mounted from
  ``.``, in a private mount namespace made by ``unshare`` before bwrap starts). bwrap's own
  arguments come on a descriptor (``--args``), so ``/proc/1/cmdline`` names nothing either;
  files of the packages that name host paths (editable-install finders, ``.pth`` files,
  ``direct_url.json``) are shown empty;
* private tmpfs ``/work`` (the working directory), ``/tmp`` and ``/dev/shm`` of ``disk``
  bytes each.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import ctypes
import dataclasses
import errno
import functools
import itertools
import os
import shlex
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
import weakref
from pathlib import Path

WORKER = Path(__file__).with_name("sandbox_worker.py")
JAIL_WORKER = "/sandbox/worker.py"
JAIL_PYTHON = "/sandbox/python"  # the interpreter's prefix in the jail, when it is not under /usr
UNSAFE = "unsafe-no-isolation"
BACKENDS = ("bwrap", UNSAFE)
INSTALL_HINT = f"install bubblewrap (`apt-get install bubblewrap`); or, for code you trust, pass backend={UNSAFE!r}"
ENVIRONMENT = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/work", "USER": "sandbox", "LOGNAME": "sandbox",
               "TMPDIR": "/tmp", "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1"}
DEVICES = ("null", "zero", "full", "random", "urandom")  # made anew per jail (root only): no shared inode
# where the jail's overlays are mounted before bwrap starts, in its private mount namespace (the
# first of these that holds none of the host directories the jail sees)
STAGING = ("/tmp", "/media", "/srv", "/opt", "/mnt")
# A user namespace charges the kernel's per-user counters of everything in it to the host user
# that made it, so one jail could take the host user's whole share of each (it did: the host's
# own inotify_init, fanotify_init, mq_open and timer_create failed). A jail gets small shares:
# rlimits (prlimit's names), which also bound what its namespace charges to the host user...
JAIL_RLIMITS = {"msgqueue": 0,  # bytes of POSIX message queues: none (nothing of Python's uses them)
                "sigpending": 64}  # queued signals and POSIX timers, of the host user's ~100k
# ... and, for counters that are no rlimit, the limits of a user namespace made for the jail
# (/proc/sys/user/*): what the jail's namespace, nested in it, charges to the host user stops
# there. (fanotify_init is refused by seccomp.) The host user has 128 inotify instances in all.
JAIL_USER_COUNTERS = {"max_inotify_instances": 1, "max_inotify_watches": 256}
# Between steps a jail gets IDLE_QUOTA us of CPU per CPU_PERIOD us (the least and the longest
# the kernel takes): threads or processes a step left running wait for the next step (they
# burned 5.5 CPU-seconds in 8 s) yet stay killable, which a frozen cgroup v1 is not (a jail
# frozen when this process dies would never end)
CPU_PERIOD, IDLE_QUOTA = 1_000_000, 1_000
CGROUP_MAGIC = {1: 0x27E0EB, 2: 0x63677270}  # statfs's f_type of cgroup v1 and v2 (linux/magic.h)
# /proc is the jail's own (bwrap's --proc: its pid namespace), but its files about the whole
# machine are the host's: memory, load and uptime moved with the host's and other jails' work
# (a jail watched another's memory), the boot id names the host. These are the jail's own:
PROC_FAKED = ("meminfo", "stat", "loadavg", "uptime", "sys/kernel/random/boot_id")
# ... and these are empty: what bubblewrap covers already (sys, sysrq-trigger, irq, bus: read-only)
# and Docker masks (Flatpak adds nothing to bubblewrap's), and counters of the whole machine
# that move with others' work (a side channel) or name its devices
PROC_EMPTIED = ("kcore", "keys", "key-users", "latency_stats", "timer_list", "timer_stats", "sched_debug",
                "vmstat", "zoneinfo", "buddyinfo", "pagetypeinfo", "slabinfo", "vmallocinfo", "diskstats",
                "interrupts", "softirqs", "schedstat", "swaps", "locks", "partitions", "sys/fs/file-nr",
                "sys/fs/inode-nr", "sys/fs/dentry-state", "sys/kernel/random/entropy_avail")
PROC_EMPTIED_DIRECTORIES = ("acpi", "asound", "scsi", "pressure", "driver", "fs")


class SandboxUnavailable(RuntimeError):
    """No OS sandbox can run here (or not the one asked for); the message says what to install."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one jail may use: bytes of memory (each process's address space, and everything
    the jail holds together; -1: no limit), processes, bytes of disk."""

    memory: int
    processes: int
    disk: int

    def worker_args(self, fd_in: int, fd_out: int, site_dirs: list[str] | tuple[str, ...] = ()) -> list[str]:
        args = ["--in", str(fd_in), "--out", str(fd_out), "--memory", str(self.memory),
                "--processes", str(self.processes), "--file-size", str(self.disk)]
        for directory in site_dirs:
            args += ["--site", directory]
        return args


class Jail:
    """One running jail: its process (stdout = the code's output) and how to end it.

    ``process`` is the command that became bwrap (or the worker itself without a jail),
    leader of its own process group; ``cgroups`` hold its processes (None without a jail)."""

    def __init__(self, process: subprocess.Popen[bytes], requests: int, replies: int,
                 cgroups: JailCgroups | None = None, pid_namespace: bool = False) -> None:
        self.process, self.requests, self.replies = process, requests, replies
        self.cgroups, self._pid_namespace = cgroups, pid_namespace
        self.ready = False  # the worker said hello: it reads requests now
        self._worker: int | None = None
        _LIVE.add(self)

    def throttle(self) -> None:
        """Between steps: next to no CPU for its processes (what a step left running waits)."""
        if self.cgroups is not None:
            self.cgroups.throttle()

    def unthrottle(self) -> None:
        """For a step: its processes run freely."""
        if self.cgroups is not None:
            self.cgroups.unthrottle()

    def out_of_memory(self) -> bool:
        """Whether the kernel killed a process of the jail at its memory limit."""
        return self.cgroups is not None and self.cgroups.oom_kills() > 0

    def worker_pid(self) -> int | None:
        """The worker's pid here (bwrap's child is the jail's init, the worker its child)."""
        if self._worker is None:
            if not self._pid_namespace:
                self._worker = self.process.pid
            else:
                init = _children(self.process.pid)
                workers = _children(init[0]) if init else []
                self._worker = workers[0] if workers else None
        return self._worker

    def kill(self) -> None:
        """Kill every process of the jail and wait until they are gone (once: again does nothing)."""
        if self not in _LIVE:
            return
        _LIVE.discard(self)
        with contextlib.suppress(OSError):  # a throttled process takes up to CPU_PERIOD to die
            self.unthrottle()
        if self._pid_namespace:
            # bwrap's child is the init of the jail's pid namespace: when it dies the kernel
            # kills every process of the namespace, then bwrap, its parent, reaps it and exits
            # (killing bwrap first would leave that init to whoever reaps orphans here)
            for pid in _children(self.process.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        if self.cgroups is not None:
            self.cgroups.remove()
        for fd in (self.requests, self.replies):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.process.stdout.close()


_LIVE: weakref.WeakSet[Jail] = weakref.WeakSet()


@atexit.register
def _kill_live_jails() -> None:
    """At exit, end the jails nobody closed (their processes would die with this one anyway;
    this also removes their cgroups)."""
    for jail in list(_LIVE):
        with contextlib.suppress(Exception):
            jail.kill()


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _spawn(argv: list[str], fds: tuple[int, int], child_fds: tuple[int, ...], cgroups: JailCgroups | None = None,
           pid_namespace: bool = False) -> Jail:
    """Start ``argv`` in a new session (its own process group). ``fds`` are our ends of the
    request and reply pipes; ``child_fds`` the descriptors the command gets, closed here once it has them."""
    try:
        process = _SPAWNER.submit(subprocess.Popen, argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, pass_fds=child_fds, env={}, start_new_session=True,
                                  cwd="/").result()
    finally:
        for fd in child_fds:
            os.close(fd)
    return Jail(process, *fds, cgroups, pid_namespace)


# bwrap's --die-with-parent ends the jail when the *thread* that started it ends: every
# jail is started from this one thread, which lives as long as the interpreter
_SPAWNER = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="arena-sandbox-spawn")


def _pipes() -> tuple[tuple[int, int], tuple[int, int]]:
    """(our ends, the jail's ends) of a request pipe and a reply pipe."""
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    return (request_w, reply_r), (request_r, reply_w)


def _data_fd(data: bytes) -> int:
    """A descriptor to read ``data`` from (a pipe, written whole now: less than its 64 KiB buffer)."""
    read, write = os.pipe()
    try:
        os.write(write, data)
    finally:
        os.close(write)
    return read


# --- cgroups --------------------------------------------------------------------------------


_CGROUP_NAMES = itertools.count()


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def filesystem_magic(path: Path) -> int | None:
    """The type of the filesystem ``path`` is on (``statfs``'s ``f_type``), None when there is no ``path``."""
    buffer = ctypes.create_string_buffer(512)  # a struct statfs (120 bytes on 64 bits), f_type first: a word
    if _libc().statfs(os.fsencode(path), buffer) != 0:
        return None
    return ctypes.c_long.from_buffer(buffer).value


@functools.cache
def cgroup_parent(controller: str) -> Path | None:
    """A directory where this process may make cgroups with ``controller``: its own cgroup, v2
    with the controller delegated to children, else v1; None when there is no writable one.
    Each is checked to be on a cgroup filesystem of its version: any other directory (a tmpfs
    mounted in its place) takes the limit files as plain files and enforces none of them."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    candidates = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            candidates.append((Path("/sys/fs/cgroup") / controller / path.lstrip("/"), 1))
        elif controllers == "":
            for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                with contextlib.suppress(OSError):
                    if controller in (root / path.lstrip("/") / "cgroup.subtree_control").read_text().split():
                        candidates.insert(0, (root / path.lstrip("/"), 2))
    for parent, version in candidates:
        if filesystem_magic(parent) != CGROUP_MAGIC[version]:
            continue
        probe = parent / f"arena-sandbox-probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError:
            continue
        for stale in parent.glob("arena-sandbox-[0-9]*-*"):  # left by a process that was killed: empty now
            if not Path(f"/proc/{stale.name.split('-')[2]}").exists():
                with contextlib.suppress(OSError):
                    stale.rmdir()
        return parent
    return None


def _control_file(group: Path, name: str, flags: int = os.O_WRONLY) -> int:
    """An open control file of ``group``, which the kernel made with it (never made here: a
    file made by this process would bound nothing)."""
    try:
        return os.open(group / name, flags)
    except FileNotFoundError:
        raise SandboxUnavailable(f"{group} has no {name}: it is no cgroup with that controller, so nothing would "
                                 f"enforce the jail's limit") from None


def _write_control(group: Path, name: str, value: int | str) -> None:
    fd = _control_file(group, name)
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)


class JailCgroups:
    """The cgroups of one jail, made before it starts: ``memory`` (its total is bounded: every
    process, tmpfs, shared memory, memfd, kernel memory), ``cpu`` (next to none between steps)
    and ``pids`` where one is writable (as root it must be: RLIMIT_NPROC does not bind root).
    v1 has a directory per controller, v2 one for all. ``hardened=False``: ``pids`` only."""

    def __init__(self, limits: Limits, hardened: bool = True) -> None:
        name = f"arena-sandbox-{os.getpid()}-{next(_CGROUP_NAMES)}"
        self.groups: dict[str, Path] = {}
        self._oom_counter: int | None = None
        self._cpu_quota: int | None = None  # the open quota file, and what to write to it
        self._quotas = (b"", b"")  # (between steps, during a step)
        try:
            for controller in ("memory", "cpu", "pids") if hardened else ("pids",):
                parent = cgroup_parent(controller)
                if parent is not None:
                    self.groups[controller] = group = parent / name
                    if not group.exists():
                        group.mkdir()
            if "pids" in self.groups:
                _write_control(self.groups["pids"], "pids.max", limits.processes)
            memory = self.groups.get("memory")
            if memory is not None:
                v1 = (memory / "memory.limit_in_bytes").exists()
                if limits.memory >= 0:
                    _write_control(memory, "memory.limit_in_bytes" if v1 else "memory.max", limits.memory)
                    swap = ("memory.memsw.limit_in_bytes", limits.memory) if v1 else ("memory.swap.max", 0)
                    if (memory / swap[0]).exists():  # else no swap accounting here: nothing to bound
                        with contextlib.suppress(OSError):
                            _write_control(memory, *swap)
                # read after every step: kept open, a read is 1 us instead of 80 (measured on v1)
                self._oom_counter = _control_file(memory, "memory.oom_control" if v1 else "memory.events",
                                                  os.O_RDONLY)
            cpu = self.groups.get("cpu")
            if cpu is not None:
                if (cpu / "cpu.cfs_quota_us").exists():  # v1
                    _write_control(cpu, "cpu.cfs_period_us", CPU_PERIOD)
                    self._quotas = (str(IDLE_QUOTA).encode(), b"-1")
                    self._cpu_quota = _control_file(cpu, "cpu.cfs_quota_us")
                else:
                    self._quotas = (f"{IDLE_QUOTA} {CPU_PERIOD}".encode(), f"max {CPU_PERIOD}".encode())
                    self._cpu_quota = _control_file(cpu, "cpu.max")
        except BaseException:
            self.remove()
            raise

    def throttle(self) -> None:
        """IDLE_QUOTA of CPU per CPU_PERIOD for the jail's processes (between steps)."""
        if self._cpu_quota is not None:
            os.pwrite(self._cpu_quota, self._quotas[0], 0)

    def unthrottle(self) -> None:
        """No CPU quota (for a step)."""
        if self._cpu_quota is not None:
            os.pwrite(self._cpu_quota, self._quotas[1], 0)

    def procs_files(self) -> list[Path]:
        """The files a process writes its pid to, to join the jail's cgroups."""
        return [group / "cgroup.procs" for group in dict.fromkeys(self.groups.values())]

    def oom_kills(self) -> int:
        """How many processes the kernel killed at the memory limit."""
        if self._oom_counter is not None:
            for line in os.pread(self._oom_counter, 4096, 0).decode().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def remove(self) -> None:
        for fd in (self._oom_counter, self._cpu_quota):
            if fd is not None:
                os.close(fd)
        self._oom_counter = self._cpu_quota = None
        for group in dict.fromkeys(self.groups.values()):
            _kill_cgroup(group)


def _kill_cgroup(group: Path) -> None:
    """Kill every process in ``group`` (a fork bomb forks while it dies: until none is left), remove it."""
    kill_file = group / "cgroup.kill"
    for _ in range(200):
        with contextlib.suppress(OSError):
            if kill_file.exists():
                kill_file.write_text("1")
        try:
            pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
        except FileNotFoundError:  # removed already, or no cgroup (refused): an empty directory
            with contextlib.suppress(OSError):
                group.rmdir()
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            group.rmdir()
            return
        time.sleep(0.005)


# --- seccomp --------------------------------------------------------------------------------

# The system calls a jail is refused, with why (none is used by CPython, its standard library,
# numpy or the usual scientific packages). Namespaces do not cover these parts of the kernel,
# or they are the kernel's largest attack surface for an unprivileged process:
SECCOMP_REFUSED = {
    # the kernel keyring is not namespaced: keys a jail adds are charged to the host's uid,
    # outlive the jail and are listed in the host's /proc/keys
    "add_key": "keyring", "keyctl": "keyring", "request_key": "keyring",
    # fanotify groups count per host user like the keyring's keys (a jail took all 128 of the
    # host's); it watches files by mount or filesystem, of no use to a jail (inotify is bounded)
    "fanotify_init": "per-user counter",
    # a new user namespace gives back every capability inside it (and with them mount,
    # network and many less-tested kernel paths); clone with a namespace flag is refused below
    "unshare": "namespaces", "setns": "namespaces",
    # mounts: only possible with capabilities a new namespace would give; refused twice
    "mount": "mounts", "umount2": "mounts", "pivot_root": "mounts", "chroot": "mounts", "move_mount": "mounts",
    "open_tree": "mounts", "fsopen": "mounts", "fsconfig": "mounts", "fsmount": "mounts", "fspick": "mounts",
    "mount_setattr": "mounts",
    # page-cache residency of shared read-only files (the interpreter's) tells what another
    # jail or the host has read; RWF_NOWAIT reads are refused below
    "mincore": "side channel", "cachestat": "side channel",
    # the largest attack surfaces a process without capabilities can reach
    "bpf": "kernel attack surface", "perf_event_open": "kernel attack surface", "userfaultfd": "kernel attack surface",
    "io_uring_setup": "kernel attack surface", "io_uring_enter": "kernel attack surface",
    "io_uring_register": "kernel attack surface",
    # another process's memory (none of the host is visible: belt and braces)
    "ptrace": "process access", "process_vm_readv": "process access", "process_vm_writev": "process access",
    "kcmp": "process access", "pidfd_getfd": "process access",
    # files by handle (the "shocker" escape) and the rest of the administrator's calls
    "name_to_handle_at": "administration", "open_by_handle_at": "administration",
    "init_module": "administration", "finit_module": "administration", "delete_module": "administration",
    "kexec_load": "administration", "kexec_file_load": "administration", "reboot": "administration",
    "swapon": "administration", "swapoff": "administration", "acct": "administration", "syslog": "administration",
    "settimeofday": "administration", "clock_settime": "administration", "clock_adjtime": "administration",
    "quotactl": "administration", "lookup_dcookie": "administration", "vhangup": "administration",
    "iopl": "administration", "ioperm": "administration",
}
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)  # CLONE_NEW*
SOCKET_FAMILIES = (1, 2, 10, 16)  # AF_UNIX, AF_INET, AF_INET6, AF_NETLINK (if_nameindex): others are refused,
#                                   AF_VSOCK above all, which no network namespace covers (a VM's host)
F_SETLEASE, RWF_NOWAIT, TIOCSTI = 1024, 0x8, 0x5412


@functools.cache
def seccomp_program() -> bytes:
    """The BPF program of the jail's seccomp filter (built once with libseccomp): everything is
    allowed but :data:`SECCOMP_REFUSED` (EPERM), ``clone`` with a namespace flag (EPERM),
    ``clone3`` (ENOSYS: its flags are out of a filter's reach, and the C library falls back to
    ``clone``), sockets of other families than :data:`SOCKET_FAMILIES` (EAFNOSUPPORT), file
    leases (they would block the host's writers), ``RWF_NOWAIT`` reads and ``TIOCSTI``. Other
    architectures' system calls (i386 on x86-64) kill the process."""
    import pyseccomp as seccomp

    refuse = seccomp.ERRNO(errno.EPERM)
    program = seccomp.SyscallFilter(seccomp.ALLOW)
    program.set_attr(seccomp.Attr.CTL_OPTIMIZE, 2)  # a binary tree of the call numbers, not a list: fewer jumps
    program.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.KILL_PROCESS)  # libseccomp's default kills the thread only
    for name in SECCOMP_REFUSED:
        with contextlib.suppress(OSError):  # a call this architecture does not have (libseccomp: EINVAL)
            program.add_rule(refuse, name)
    program.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    for flag in NAMESPACE_FLAGS:
        program.add_rule(refuse, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    for family in [0, *range(3, 10), *range(11, 16)]:
        program.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), "socket", seccomp.Arg(0, seccomp.EQ, family))
    program.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), "socket", seccomp.Arg(0, seccomp.GT, max(SOCKET_FAMILIES)))
    program.add_rule(refuse, "fcntl", seccomp.Arg(1, seccomp.EQ, F_SETLEASE))
    for call in ("preadv2", "pwritev2"):
        program.add_rule(refuse, call, seccomp.Arg(5, seccomp.MASKED_EQ, RWF_NOWAIT, RWF_NOWAIT))
    program.add_rule(refuse, "ioctl", seccomp.Arg(1, seccomp.EQ, TIOCSTI))
    with tempfile.TemporaryFile() as file:
        program.export_bpf(file)
        file.seek(0)
        return file.read()


# --- bubblewrap -----------------------------------------------------------------------------


@functools.cache
def bwrap_problem() -> str | None:
    """Why bwrap cannot run jails here, or None when it can."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (`apt-get install bubblewrap`)"
    for program in ("unshare", "mount", "prlimit"):
        if shutil.which(program) is None:
            return f"{program} is not installed (`apt-get install util-linux mount`)"
    try:
        probe = subprocess.run(["bwrap", "--unshare-all", "--ro-bind", "/", "/", "true"], capture_output=True,
                               text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap does not run: {error}"
    if probe.returncode != 0:
        return (f"bwrap cannot create namespaces here ({probe.stderr.strip()}); unprivileged user namespaces "
                f"may be disabled (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0, "
                f"or an AppArmor profile for bwrap)")
    try:
        seccomp_program()
    except (ImportError, OSError, RuntimeError) as error:
        return f"no seccomp filter can be built ({error}); install libseccomp2 and pyseccomp"
    if cgroup_parent("memory") is None:
        return ("no writable memory cgroup (v2 with the memory controller delegated to this process's cgroup, "
                "or v1) to bound a jail's memory")
    if cgroup_parent("cpu") is None:
        return ("no writable cpu cgroup (v2 with the cpu controller delegated to this process's cgroup, or v1) "
                "to stop what a step leaves running from using the CPU between steps")
    if os.geteuid() == 0 and cgroup_parent("pids") is None:
        return ("running as root, where RLIMIT_NPROC does not bind, and no writable pids cgroup "
                "(v2 delegated or v1) was found to cap processes; run as a non-root user")
    return None


@dataclasses.dataclass(frozen=True)
class InterpreterView:
    """What of the host a jail sees: the interpreter's path in the jail, the host directories
    it sees read-only and where, its site-packages and the files shown empty (jail paths)."""

    executable: str
    mounts: tuple[tuple[str, str], ...]
    site_dirs: tuple[str, ...]
    masked: tuple[str, ...]
    library_path: str | None  # the moved prefix's lib, for a binary that names it by its host path


@functools.cache
def interpreter_view() -> InterpreterView:
    """``/usr`` stays ``/usr`` (it names nothing of this host); the interpreter's prefix, when
    elsewhere (pyenv, conda, a build in a home directory), is ``/sandbox/python``; each
    site-packages elsewhere (a virtualenv in a project checkout) is ``/sandbox/site-packages-N``."""
    mounts = [("/usr", "/usr")]
    prefix = os.path.realpath(sys.base_prefix)
    library_path = None
    if not _under(prefix, ["/usr"]):
        mounts.append((prefix, JAIL_PYTHON))
        library_path = f"{JAIL_PYTHON}/lib"
    executable = os.path.realpath(sys.executable)
    if _in_jail(executable, mounts) is None:
        mounts.append((os.path.dirname(executable), "/sandbox/bin"))
    site_dirs, masked = [], []
    for directory in dict.fromkeys(os.path.realpath(d) for d in [*site.getsitepackages(), sysconfig.get_path(
            "purelib"), sysconfig.get_path("platlib")] if os.path.isdir(d)):
        if _in_jail(directory, mounts) is None:
            mounts.append((directory, f"/sandbox/site-packages-{len(mounts)}"))
        site_dirs.append(_in_jail(directory, mounts))
        masked += [_in_jail(str(path), mounts) for path in _naming_host_paths(Path(directory))]
    return InterpreterView(_in_jail(executable, mounts), tuple(mounts), tuple(site_dirs), tuple(masked),
                           library_path)


def _naming_host_paths(site_dir: Path) -> list[Path]:
    """The files of a site-packages that name host paths and that nothing needs under ``-S``:
    editable-install finders and links, ``.pth`` files, ``direct_url.json``."""
    found = [path for pattern in ("__editable__*", "*.pth", "*.egg-link") for path in site_dir.glob(pattern)]
    return sorted({*found, *site_dir.glob("*.dist-info/direct_url.json")})


def _under(path: str, directories: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in directories)


def _in_jail(path: str, mounts: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> str | None:
    """Where the jail sees the host's ``path`` (None: it does not)."""
    for host, inside in mounts:
        if _under(path, [host]):
            return inside + path[len(host.rstrip("/")):]
    return None


def _staging(mounts: tuple[tuple[str, str], ...]) -> str:
    hosts = [host for host, _ in mounts] + [str(WORKER)]
    for directory in STAGING:
        if os.path.isdir(directory) and not any(_under(host, [directory]) for host in hosts):
            return directory
    raise SandboxUnavailable(f"no directory of {', '.join(STAGING)} is free to stage a jail's mounts in")


def bwrap_options(limits: Limits, fd_seccomp: int | None, fd_worker: int, staging: str,
                  own_devices: bool) -> list[str]:
    """bwrap's options for one jail (given on a descriptor: they name host paths); the overlays
    of :func:`launcher` are in ``staging``."""
    view = interpreter_view()
    args = ["--unshare-all", "--die-with-parent", "--new-session", "--uid", "1000", "--gid", "1000",
            "--cap-drop", "ALL", "--clearenv", "--hostname", "sandbox", "--proc", "/proc", "--dev", "/dev"]
    for path in ("/work", "/tmp", "/dev/shm"):  # first: a host directory bound below stays visible inside them
        args += ["--size", str(limits.disk), "--perms", "1777", "--tmpfs", path]
    if own_devices:
        for device in DEVICES:
            args += ["--dev-bind", f"{staging}/dev/{device}", f"/dev/{device}"]
    args += ["--remount-ro", "/dev"]  # bwrap's /dev is a tmpfs without a size: its device nodes only
    faked, emptied, emptied_directories = proc_masks()
    for name in faked:
        args += ["--ro-bind", f"{staging}/proc/{_flat(name)}", f"/proc/{name}"]
    for name in emptied:
        args += ["--ro-bind", f"{staging}/empty-file", f"/proc/{name}"]
    for name in emptied_directories:
        args += ["--ro-bind", f"{staging}/empty", f"/proc/{name}"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):  # merged-/usr symlinks
        if os.path.islink(f"/{name}"):
            args += ["--symlink", os.readlink(f"/{name}"), f"/{name}"]
    for number, (_, inside) in enumerate(view.mounts):
        args += ["--ro-bind", f"{staging}/{number}", inside]
    for path in view.masked:
        args += ["--ro-bind", f"{staging}/empty-file", path]
    args += ["--ro-bind-data", str(fd_worker), JAIL_WORKER]
    environment = ENVIRONMENT | ({"LD_LIBRARY_PATH": view.library_path} if view.library_path else {})
    for name, value in environment.items():
        args += ["--setenv", name, value]
    if fd_seccomp is not None:
        args += ["--seccomp", str(fd_seccomp)]
    return [*args, "--chdir", "/work", "--remount-ro", "/"]


@functools.cache
def proc_masks() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The files of /proc shown as the jail's own, the files shown empty and the directories
    shown empty: of :data:`PROC_FAKED`, :data:`PROC_EMPTIED` and :data:`PROC_EMPTIED_DIRECTORIES`,
    those this kernel has (a fresh procfs has the host's entries; bwrap cannot bind on a missing one)."""
    def present(names: tuple[str, ...], directory: bool) -> tuple[str, ...]:
        # (a file a container runtime masked here, with /dev/null, is the kernel's in the jail's procfs)
        return tuple(n for n in names if os.path.exists(f"/proc/{n}") and os.path.isdir(f"/proc/{n}") == directory)

    return (present(PROC_FAKED, False), present(PROC_EMPTIED, False),
            present(PROC_EMPTIED_DIRECTORIES, True))


def proc_files(limits: Limits) -> dict[str, str]:
    """The contents of the jail's own :data:`PROC_FAKED`: its memory limit as the machine's
    memory, all of it free; the host's CPUs (``os.cpu_count`` counts the ``cpu`` lines of
    ``stat``), all idle; no load; booted when the jail started, with a boot id of its own."""
    total = (limits.memory if limits.memory >= 0 else _host_memory()) // 1024
    meminfo = "".join(f"{key + ':':<16}{value:>8} kB\n" for key, value in (
        ("MemTotal", total), ("MemFree", total), ("MemAvailable", total), ("Buffers", 0), ("Cached", 0),
        ("SwapCached", 0), ("Active", 0), ("Inactive", 0), ("SwapTotal", 0), ("SwapFree", 0), ("Shmem", 0)))
    idle = " 0" * 10
    cpus = "".join(f"cpu{n}{idle}\n" for n in range(os.cpu_count() or 1))
    stat = (f"cpu {idle}\n{cpus}intr 0\nctxt 0\nbtime {int(time.time())}\nprocesses 1\nprocs_running 1\n"
            f"procs_blocked 0\nsoftirq 0\n")
    return {"meminfo": meminfo, "stat": stat, "loadavg": "0.00 0.00 0.00 1/1 1\n", "uptime": "0.00 0.00\n",
            "sys/kernel/random/boot_id": f"{uuid.uuid4()}\n"}


@functools.cache
def _host_memory() -> int:
    """Bytes of memory of this machine (a jail without a memory limit shows it: a constant)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _flat(proc_name: str) -> str:
    return proc_name.replace("/", "-")


def worker_command(limits: Limits, fd_in: int, fd_out: int) -> list[str]:
    """The worker's command in the jail (jail paths only), reading requests on ``fd_in`` and replying on ``fd_out``."""
    view = interpreter_view()
    return [view.executable, "-I", "-S", JAIL_WORKER, *limits.worker_args(fd_in, fd_out, view.site_dirs)]


def launcher(cgroups: JailCgroups, staging: str, fd_options: int, command: list[str], own_devices: bool,
             proc: dict[str, str]) -> list[str]:
    """The command that takes the jail's rlimits (:data:`JAIL_RLIMITS`), joins its cgroups,
    mounts its overlays in a private mount namespace (each mounted from ``.``: the kernel shows
    the path it was given), writes its files of ``/proc`` (``proc``: name -> text), enters a user
    namespace with :data:`JAIL_USER_COUNTERS` (as root a new one, after the mounts and device
    nodes that need the host's root; otherwise the one the mounts were made in) and becomes bwrap
    running ``command``."""
    view = interpreter_view()
    q = shlex.quote
    lines = ["set -e", *(f"echo $$ > {q(str(procs))}" for procs in cgroups.procs_files()),
             f"mount -t tmpfs -o size=1m,mode=755 arena-sandbox {q(staging)}",
             f"mkdir {q(staging)}/empty {q(staging)}/dev {q(staging)}/proc " + " ".join(
                 f"{q(staging)}/{n}" for n in range(len(view.mounts))),
             f": > {q(staging)}/empty-file"]
    for number, (host, _) in enumerate(view.mounts):
        lines.append(f"cd {q(host)} && mount -t overlay -o ro,lowerdir=.:{q(staging)}/empty arena-sandbox "
                     f"{q(staging)}/{number}")
    if own_devices:
        lines.append("cp -a " + " ".join(f"/dev/{device}" for device in DEVICES) + f" {q(staging)}/dev/")
    for name, text in proc.items():
        lines.append(f"printf %s {q(text)} > {q(staging)}/proc/{q(_flat(name))}")
    lines += ["cd /", "unset OLDPWD PWD"]  # sh exports them: the jail's init would show where we went
    # a kernel without per-namespace counters (before 4.9) has no such file: nothing to set
    counters = [f"[ ! -e {path} ] || echo {value} > {path}" for path, value in (
        (f"/proc/sys/user/{name}", value) for name, value in JAIL_USER_COUNTERS.items())]
    bwrap = f"exec {q(shutil.which('bwrap') or 'bwrap')} --args {fd_options} -- {shlex.join(command)}"
    if os.geteuid() == 0:
        inner = "\n".join(["set -e", *counters, bwrap])
        lines.append(f"exec {q(shutil.which('unshare') or 'unshare')} --user --map-root-user /bin/sh -c {q(inner)}")
    else:
        lines += [*counters, bwrap]
    user = [] if os.geteuid() == 0 else ["--map-root-user"]
    rlimits = [f"--{name}={value}" for name, value in JAIL_RLIMITS.items()]
    return [shutil.which("prlimit") or "prlimit", *rlimits, shutil.which("unshare") or "unshare", *user,
            "--mount", "--propagation", "private", "/bin/sh", "-c", "\n".join(lines)]


def start_bwrap(limits: Limits, hardened: bool = True) -> Jail:
    """A jail for ``limits``; ``hardened=False`` leaves out its memory cgroup and seccomp filter
    (only to measure what they cost: ``arena-bench --only sandbox``)."""
    view = interpreter_view()
    staging, own_devices = _staging(view.mounts), os.geteuid() == 0  # mknod needs root of the host
    cgroups = JailCgroups(limits, hardened)
    ours, theirs = _pipes()
    data: list[int] = []  # descriptors bwrap reads its options, the worker and the seccomp program from
    try:
        data.append(_data_fd(WORKER.read_bytes()))
        if hardened:
            data.append(_data_fd(seccomp_program()))
        options = bwrap_options(limits, data[1] if hardened else None, data[0], staging, own_devices)
        data.append(_data_fd(b"".join(option.encode() + b"\0" for option in options)))
        argv = launcher(cgroups, staging, data[-1], worker_command(limits, *theirs), own_devices,
                        proc_files(limits))
    except BaseException:
        for fd in (*theirs, *data):
            os.close(fd)
        for fd in ours:
            os.close(fd)
        cgroups.remove()
        raise
    try:
        return _spawn(argv, ours, (*theirs, *data), cgroups, pid_namespace=True)
    except BaseException:  # (_spawn closed the jail's ends)
        for fd in ours:
            os.close(fd)
        cgroups.remove()
        raise


# --- no isolation -----------------------------------------------------------------------------


def start_unsafe(limits: Limits) -> Jail:
    """The worker as a plain child process: rlimits, no jail. Only for code you trust."""
    ours, theirs = _pipes()
    argv = [sys.executable, "-I", "-S", str(WORKER), *limits.worker_args(*theirs, site.getsitepackages())]
    return _spawn(argv, ours, theirs)


def pick_backend(backend: str | None) -> str:
    """``backend`` when it can run here, bwrap for ``None``; SandboxUnavailable otherwise."""
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)} or None (bwrap), got {backend!r}")
    if backend == UNSAFE:
        return backend
    problem = bwrap_problem()
    if problem is None:
        return "bwrap"
    what = "the bwrap sandbox cannot run here" if backend else "no OS sandbox to run the code in"
    raise SandboxUnavailable(f"{what} (bwrap: {problem}). To fix: {INSTALL_HINT}")

