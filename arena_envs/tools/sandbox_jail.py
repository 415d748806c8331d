"""The OS sandboxes behind :class:`~arena_envs.tools.sandbox.PythonSandboxEnv`: bubblewrap and Docker.

A backend turns a :class:`Limits` into the command that starts
:mod:`~arena_envs.tools.sandbox_worker` in a fresh jail, and kills a jail with everything
in it. :func:`pick_backend` chooses one (``bwrap`` where it can make namespaces, else
``docker`` where a daemon answers) or refuses with what to install.

``bwrap`` (Debian's ``bubblewrap``): new user, pid, network, ipc, uts and cgroup
namespaces (``--unshare-all``), a new session, ``--die-with-parent``; a read-only view of
``/usr``, the interpreter's prefix and its site-packages and nothing else of the host (no
``/etc``, no home, no project checkout); private tmpfs ``/work`` (the working directory),
``/tmp`` and ``/dev/shm`` of ``disk`` bytes each; uid 1000 without capabilities inside.
Processes are capped by ``RLIMIT_NPROC``, which does not bind a process whose uid outside is root: as
root, a ``pids`` cgroup (v2 where it is delegated, else v1) caps them instead, and without
a writable one the backend refuses rather than run a jail a fork bomb could escape from.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import dataclasses
import functools
import itertools
import os
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import time
import uuid
import weakref
from collections.abc import Callable
from pathlib import Path

WORKER = Path(__file__).with_name("sandbox_worker.py")
JAIL_WORKER = "/sandbox/worker.py"
UNSAFE = "unsafe-no-isolation"
BACKENDS = ("bwrap", "docker", UNSAFE)
INSTALL_HINT = ("install bubblewrap (`apt-get install bubblewrap`) or start a Docker daemon; "
                f"or, for code you trust, pass backend={UNSAFE!r}")
ENVIRONMENT = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/work", "USER": "sandbox", "LOGNAME": "sandbox",
               "TMPDIR": "/tmp", "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1"}


class SandboxUnavailable(RuntimeError):
    """No OS sandbox can run here (or not the one asked for); the message says what to install."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one jail may use: bytes of address space (-1: no limit), processes, bytes of disk."""

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

    ``process`` is bwrap (or docker's client, or the worker itself without a jail), leader of
    its own process group; ``stop`` ends what killing that group does not (a cgroup, a
    container)."""

    def __init__(self, process: subprocess.Popen[bytes], requests: int, replies: int, stop: Callable[[], None],
                 pid_namespace: bool) -> None:
        self.process, self.requests, self.replies = process, requests, replies
        self._stop, self._pid_namespace = stop, pid_namespace
        self.ready = False  # the worker said hello: it reads requests now
        _LIVE.add(self)

    def kill(self) -> None:
        """Kill every process of the jail and wait until they are gone (once: again does nothing)."""
        if self not in _LIVE:
            return
        _LIVE.discard(self)
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
        self._stop()
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


def _spawn(argv: list[str], fds: tuple[int, int], child_fds: tuple[int, ...], docker: bool = False,
           stop: Callable[[], None] = lambda: None, pid_namespace: bool = False) -> Jail:
    """Start ``argv`` in a new session (its own process group). ``fds`` are our ends of the
    request and reply pipes; ``child_fds`` the jail's ends, closed here once it has them."""
    stdin, stderr = (child_fds[0], child_fds[1]) if docker else (subprocess.DEVNULL, subprocess.STDOUT)
    process = _SPAWNER.submit(subprocess.Popen, argv, stdin=stdin, stdout=subprocess.PIPE, stderr=stderr,
                              pass_fds=() if docker else child_fds, env=None if docker else {},
                              start_new_session=True, cwd="/").result()
    for fd in child_fds:
        os.close(fd)
    return Jail(process, *fds, stop, pid_namespace)


# bwrap's --die-with-parent ends the jail when the *thread* that started it ends: every
# jail is started from this one thread, which lives as long as the interpreter
_SPAWNER = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="arena-sandbox-spawn")


def _pipes() -> tuple[tuple[int, int], tuple[int, int]]:
    """(our ends, the jail's ends) of a request pipe and a reply pipe."""
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    return (request_w, reply_r), (request_r, reply_w)


# --- bubblewrap -----------------------------------------------------------------------------


@functools.cache
def bwrap_problem() -> str | None:
    """Why bwrap cannot run jails here, or None when it can."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (`apt-get install bubblewrap`)"
    try:
        probe = subprocess.run(["bwrap", "--unshare-all", "--ro-bind", "/", "/", "true"], capture_output=True,
                               text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap does not run: {error}"
    if probe.returncode != 0:
        return (f"bwrap cannot create namespaces here ({probe.stderr.strip()}); unprivileged user namespaces "
                f"may be disabled (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0, "
                f"or an AppArmor profile for bwrap)")
    if os.geteuid() == 0 and _pids_cgroup_parent() is None:
        return ("running as root, where RLIMIT_NPROC does not bind, and no writable pids cgroup "
                "(v2 delegated or v1) was found to cap processes; run as a non-root user")
    return None


def interpreter_mounts() -> tuple[str, list[tuple[str, str]], list[str]]:
    """The interpreter, the (host, jail) directories the jail sees read-only, and its site-packages
    in the jail. The interpreter's prefix keeps its path (its binary may name its libraries by
    it); a site-packages elsewhere (a virtualenv in a project checkout) is shown at
    ``/sandbox/site-packages-N``, so the jail learns nothing of the host's directories."""
    executable = os.path.realpath(sys.executable)
    mounts: list[str] = []
    for path in sorted({"/usr", os.path.realpath(sys.base_prefix), os.path.dirname(executable)}, key=len):
        if not _under(path, mounts):
            mounts.append(path)
    pairs = [(path, path) for path in mounts]
    site_dirs = []
    for directory in dict.fromkeys(os.path.realpath(d) for d in [*site.getsitepackages(), sysconfig.get_path(
            "purelib"), sysconfig.get_path("platlib")] if os.path.isdir(d)):
        if not _under(directory, mounts):
            pairs.append((directory, f"/sandbox/site-packages-{len(pairs)}"))
            directory = pairs[-1][1]
        site_dirs.append(directory)
    return executable, pairs, site_dirs


def _under(path: str, directories: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in directories)


def bwrap_argv(limits: Limits, fd_in: int, fd_out: int) -> list[str]:
    """The bwrap command for one jail whose worker reads requests on ``fd_in``, replies on ``fd_out``."""
    executable, mounts, site_dirs = interpreter_mounts()
    argv = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--die-with-parent", "--new-session",
            "--uid", "1000", "--gid", "1000", "--cap-drop", "ALL", "--clearenv", "--hostname", "sandbox",
            "--proc", "/proc", "--dev", "/dev"]
    for path in ("/work", "/tmp", "/dev/shm"):  # first: a host directory bound below stays visible inside them
        argv += ["--size", str(limits.disk), "--perms", "1777", "--tmpfs", path]
    argv += ["--remount-ro", "/dev"]  # bwrap's /dev is a tmpfs without a size: its device nodes only
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):  # merged-/usr symlinks, or real directories
        host = f"/{name}"
        if os.path.islink(host):
            argv += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            mounts.append((host, host))
    for host, inside in mounts:
        argv += ["--ro-bind", host, inside]
    argv += ["--ro-bind", str(WORKER), JAIL_WORKER]
    for name, value in ENVIRONMENT.items():
        argv += ["--setenv", name, value]
    argv += ["--chdir", "/work", "--remount-ro", "/", executable, "-I", "-S", JAIL_WORKER,
             *limits.worker_args(fd_in, fd_out, site_dirs)]
    return argv


_CGROUP_NAMES = itertools.count()


@functools.cache
def _pids_cgroup_parent() -> Path | None:
    """A directory where this process may make pids cgroups: its own pids cgroup, v2 with the
    controller delegated to children, else v1; None when there is no writable one."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    candidates = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            candidates.append(Path("/sys/fs/cgroup/pids") / path.lstrip("/"))
        elif controllers == "":
            for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                with contextlib.suppress(OSError):
                    if "pids" in (root / path.lstrip("/") / "cgroup.subtree_control").read_text().split():
                        candidates.insert(0, root / path.lstrip("/"))
    for parent in candidates:
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


def _make_pids_cgroup(processes: int) -> Path | None:
    parent = _pids_cgroup_parent()
    if parent is None:
        return None
    group = parent / f"arena-sandbox-{os.getpid()}-{next(_CGROUP_NAMES)}"
    group.mkdir()
    (group / "pids.max").write_text(str(processes))
    return group


def _kill_cgroup(group: Path) -> None:
    """Kill every process in ``group`` (a fork bomb forks while it dies: until none is left), remove it."""
    kill_file = group / "cgroup.kill"
    for _ in range(200):
        with contextlib.suppress(OSError):
            if kill_file.exists():
                kill_file.write_text("1")
        try:
            pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
        except FileNotFoundError:  # removed already
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            group.rmdir()
            return
        time.sleep(0.005)


def start_bwrap(limits: Limits) -> Jail:
    ours, theirs = _pipes()
    argv = bwrap_argv(limits, *theirs)
    group = _make_pids_cgroup(limits.processes) if os.geteuid() == 0 else None
    if group is not None:  # the shell joins the cgroup, then becomes bwrap: no process of the jail is outside it
        argv = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group / "cgroup.procs"), *argv]
    return _spawn(argv, ours, theirs, stop=(lambda: _kill_cgroup(group)) if group else (lambda: None),
                  pid_namespace=True)


# --- Docker ---------------------------------------------------------------------------------


@functools.cache
def docker_problem() -> str | None:
    """Why Docker cannot run jails here, or None when a daemon answers."""
    if shutil.which("docker") is None:
        return "docker is not installed"
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"`docker info` failed: {error}"
    if info.returncode != 0:
        detail = (info.stderr.strip().splitlines() or ["no answer"])[-1]
        return f"no Docker daemon answers `docker info` ({detail})"
    return None


def docker_argv(limits: Limits, image: str, name: str) -> list[str]:
    """The ``docker run`` command for one jail: the worker's requests on its stdin, replies on
    its stderr, the code's output on its stdout (inside, the worker moves them off 0 and 2)."""
    tmpfs = f"rw,nosuid,nodev,size={limits.disk},mode=1777"
    argv = ["docker", "run", "--rm", "-i", "--name", name, "--network", "none", "--read-only",
            "--user", "1000:1000", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--pids-limit", str(limits.processes), "--tmpfs", f"/work:{tmpfs}", "--tmpfs", f"/tmp:{tmpfs}",
            "--workdir", "/work", "--hostname", "sandbox", "--log-driver", "none",
            "-v", f"{WORKER}:{JAIL_WORKER}:ro"]
    if limits.memory >= 0:
        argv += ["--memory", str(limits.memory), "--memory-swap", str(limits.memory)]
    for variable, value in ENVIRONMENT.items():
        if variable != "PATH":  # the image's PATH finds its python
            argv += ["--env", f"{variable}={value}"]
    argv += [image, "python", "-I", "-S", JAIL_WORKER, *limits.worker_args(0, 2)]
    return argv


def start_docker(limits: Limits, image: str) -> Jail:
    name = f"arena-sandbox-{uuid.uuid4().hex[:16]}"
    ours, theirs = _pipes()

    def stop() -> None:  # the client's death does not stop a container: the daemon must
        subprocess.run(["docker", "kill", name], capture_output=True, timeout=60)

    return _spawn(docker_argv(limits, image, name), ours, theirs, docker=True, stop=stop)


# --- no isolation -----------------------------------------------------------------------------


def start_unsafe(limits: Limits) -> Jail:
    """The worker as a plain child process: rlimits, no jail. Only for code you trust."""
    ours, theirs = _pipes()
    argv = [sys.executable, "-I", "-S", str(WORKER), *limits.worker_args(*theirs, site.getsitepackages())]
    return _spawn(argv, ours, theirs)


def pick_backend(backend: str | None) -> str:
    """``backend`` when it can run here, or the first that can (``None``); SandboxUnavailable otherwise."""
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)} or None (pick one), got {backend!r}")
    if backend == UNSAFE:
        return backend
    problems = {"bwrap": bwrap_problem, "docker": docker_problem}
    found = {}
    for name in [backend] if backend else ["bwrap", "docker"]:
        found[name] = problems[name]()
        if found[name] is None:
            return name
    reasons = "; ".join(f"{name}: {why}" for name, why in found.items())
    what = f"the {backend} sandbox cannot run here" if backend else "no OS sandbox to run the code in"
    raise SandboxUnavailable(f"{what} ({reasons}). To fix: {INSTALL_HINT}")
