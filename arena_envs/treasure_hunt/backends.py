"""Where a hunt lives: ``MemoryBackend`` (a tree in memory) and ``DiskBackend`` (a directory on disk).

Both answer the same three questions about paths relative to the hunt root (``""`` is the
root, ``"amber/cedar"`` a directory below it) and give the same answers for the same hunt:
what is there (``kind``), what a directory holds (``listing``) and what a file says (``read``).

Visibility rules shared by both backends:

* names starting with ``.`` (such as ``.treasure_hunt_config.json``), and names that are not
  printable ASCII or hold a backslash, are invisible: never listed, never reached;
* anything but a regular file or a directory is invisible;
* ``read`` refuses files larger than ``MAX_CAT_BYTES``.

The disk backend never trusts a name twice. It walks every path one component at a time
from a descriptor of the root: each directory is opened with ``O_NOFOLLOW | O_DIRECTORY``
relative to its parent's descriptor, ``..`` goes back to a descriptor already held (never
looked up by name), symlinks are read with ``readlink`` and followed by the same walk, so a
symlink that leads out of the hunt is caught however it is written. A file is ``lstat``-ed
through its directory's descriptor, opened without following symlinks and without blocking
(``O_NONBLOCK``: a FIFO swapped in can't hang a call) and accepted only if the opened file
is the one that was checked (same device and inode), is regular, has a single link (a hard
link can't smuggle in the config) and is not the config. A concurrent process that renames
directories, swaps in symlinks or plants FIFOs can make a call fail, never make it read
outside the hunt.
"""

from __future__ import annotations

import errno
import os
import stat
import weakref
from collections.abc import Mapping
from pathlib import Path, PurePath, PurePosixPath
from typing import Protocol

CONFIG_FILE = ".treasure_hunt_config.json"
MAX_PATH_LENGTH = 1024
MAX_CAT_BYTES = 8192
MAX_SYMLINKS = 40
"""Symlinks followed in one path before it counts as a loop (the Linux limit)."""

DIRECTORY = "directory"
FILE = "file"
OUTSIDE = "outside"

_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | _O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | _O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
_HAS_DIR_FD = (
    bool(_O_DIRECTORY and _O_NOFOLLOW)
    and os.open in os.supports_dir_fd
    and os.stat in os.supports_dir_fd
    and os.scandir in os.supports_fd
)
"""Whether this platform can walk paths from directory descriptors (POSIX: yes; Windows: no)."""


class OutsideHunt(PermissionError):
    """The path's symlinks lead out of the hunt."""


class HuntBackend(Protocol):
    """Where a hunt's directories and files live. Paths are relative to the root, ``""`` being the root."""

    root: PurePath

    def kind(self, path: str) -> str | None:
        """``DIRECTORY``, ``FILE``, ``OUTSIDE`` (symlinks lead out of the hunt) or ``None`` (nothing visible)."""

    def listing(self, path: str) -> str | None:
        """The directory's visible entries as ``ls`` prints them, or ``None`` if it is no visible directory.
        Raises ``OutsideHunt`` if the path leads out of the hunt."""

    def read(self, path: str) -> str | None:
        """The file's text, or ``None`` if it exceeds ``MAX_CAT_BYTES``. Raises ``OutsideHunt`` if the
        path leads out of the hunt, another ``OSError`` if it is no visible regular file."""


def is_visible_name(name: str) -> bool:
    """Whether an entry called ``name`` may be shown to the agent."""
    return not name.startswith(".") and name.isascii() and name.isprintable() and "\\" not in name


def is_hidden(path: str) -> bool:
    """Whether the hunt path ``path`` passes through a dot-name."""
    return path.startswith(".") or "/." in path


def format_listing(file_names: list[str], dir_names: list[str]) -> str:
    """What ``ls`` prints: visible files, then visible directories ending in ``/``, each sorted."""
    files = sorted(name for name in file_names if is_visible_name(name))
    dirs = sorted(f"{name}/" for name in dir_names if is_visible_name(name))
    return "\n".join(files + dirs)


def locate(cwd: str, path: str) -> str | None:
    """Resolve ``path`` lexically against ``cwd``; ``None`` if it leaves the hunt or can't be in it."""
    if len(path) > MAX_PATH_LENGTH or not path.isascii() or not path.isprintable() or "\\" in path:
        return None
    if path and "/" not in path and path != "." and path != "..":
        return f"{cwd}/{path}" if cwd else path
    parts = [] if path.startswith("/") or not cwd else cwd.split("/")
    for part in path.split("/"):
        if part == "..":
            if not parts:
                return None
            parts.pop()
        elif part and part != ".":
            parts.append(part)
    return "/".join(parts)


class MemoryBackend:
    """A hunt held in memory: ``directories`` maps each directory to the names of its files
    and of its subdirectories, ``files`` maps each file to its text (see ``HuntLayout``)."""

    root: PurePath = PurePosixPath("/")

    def __init__(self, directories: Mapping[str, tuple[list[str], list[str]]], files: Mapping[str, str]) -> None:
        self._directories = directories
        self._files = files
        self._listings: dict[str, str] = {}

    def kind(self, path: str) -> str | None:
        if path in self._files:
            return FILE
        if path in self._directories:
            return DIRECTORY
        return None

    def listing(self, path: str) -> str | None:
        text = self._listings.get(path)
        if text is None:
            names = self._directories.get(path)
            if names is None:
                return None
            text = self._listings[path] = format_listing(*names)
        return text

    def read(self, path: str) -> str | None:
        text = self._files.get(path)
        if text is None:
            raise FileNotFoundError(path)
        if len(text) * 4 > MAX_CAT_BYTES and len(text.encode("utf-8", "replace")) > MAX_CAT_BYTES:
            return None
        return text


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


class _Walk:
    """The open descriptors of one path walk: ``directories[-1]`` holds the entry ``name``
    (``None`` when the path ends at that directory itself), whose ``lstat`` is ``info``.
    ``directories[0]`` is the backend's root descriptor, which the walk does not own."""

    __slots__ = ("directories", "name", "info")

    def __init__(self, root_fd: int) -> None:
        self.directories = [root_fd]
        self.name: str | None = None
        self.info: os.stat_result | None = None

    def close(self) -> None:
        for descriptor in self.directories[1:]:
            os.close(descriptor)
        del self.directories[1:]


class DiskBackend:
    """A hunt in a directory on disk, reached only through directory descriptors (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        if not _HAS_DIR_FD:
            raise NotImplementedError("the disk backend needs openat, O_NOFOLLOW and fdopendir; use the memory backend")
        self.root: PurePath = Path(os.path.abspath(root))
        self._real_root = os.path.realpath(self.root)
        self._root_fd: int | None = None
        self._prefixes = tuple({str(self.root).rstrip(os.sep) + os.sep, self._real_root.rstrip(os.sep) + os.sep})
        try:
            self._config_identity: tuple[int, int] | None = _identity(
                os.stat(os.path.join(self._real_root, CONFIG_FILE), follow_symlinks=False)
            )
        except (OSError, ValueError):
            self._config_identity = None

    # --- the walk --------------------------------------------------------------------

    def _walk(self, path: str) -> _Walk:
        """Walk ``path`` from the root, following symlinks only inside the hunt.

        Raises ``OutsideHunt`` if it leads out of the hunt, another ``OSError`` if a
        component is missing, invisible, no directory, or a symlink loop.
        """
        walk = _Walk(self._root_descriptor())
        try:
            self._advance(walk, [part for part in reversed(path.split("/")) if part])
        except BaseException:
            walk.close()
            raise
        return walk

    def _root_descriptor(self) -> int:
        """The root, opened once and held until the backend is dropped (raises while it is missing)."""
        if self._root_fd is None:
            descriptor = os.open(self._real_root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
            self._root_fd = descriptor
            weakref.finalize(self, os.close, descriptor)
        return self._root_fd

    def _advance(self, walk: _Walk, parts: list[str]) -> None:
        """Consume ``parts`` (last component first) into ``walk``."""
        directories = walk.directories
        links = 0
        while parts:
            name = parts.pop()
            if name == ".":
                continue
            if name == "..":
                if len(directories) == 1:
                    raise OutsideHunt(errno.EACCES, "path leads out of the hunt")
                os.close(directories.pop())
                continue
            if not is_visible_name(name):
                raise FileNotFoundError(errno.ENOENT, "not visible", name)
            if parts:  # an inner component: a directory, or a symlink to follow
                try:
                    directories.append(os.open(name, _DIRECTORY_FLAGS, dir_fd=directories[-1]))
                    continue
                except OSError as error:
                    if error.errno not in (errno.ENOTDIR, errno.ELOOP, errno.EMLINK):
                        raise
                target = self._link_target(name, directories[-1])  # raises if it is no symlink
            else:  # the last component: look at it without following it
                info = os.stat(name, dir_fd=directories[-1], follow_symlinks=False)
                if not stat.S_ISLNK(info.st_mode):
                    walk.name, walk.info = name, info
                    return
                target = os.readlink(name, dir_fd=directories[-1])
            links += 1
            if links > MAX_SYMLINKS:
                raise OSError(errno.ELOOP, "too many levels of symbolic links", name)
            if target.startswith("/"):
                target = self._inside_root(target)
                while len(directories) > 1:
                    os.close(directories.pop())
            parts.extend(part for part in reversed(target.split("/")) if part)

    def _link_target(self, name: str, directory: int) -> str:
        try:
            return os.readlink(name, dir_fd=directory)
        except OSError as error:
            if error.errno == errno.EINVAL:  # not a symlink: a file where a directory was needed
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", name) from None
            raise

    def _inside_root(self, target: str) -> str:
        """An absolute symlink target as a path below the root (still to be walked), or refuse."""
        if target.rstrip("/") in (str(self.root), self._real_root):
            return ""
        for prefix in self._prefixes:
            if target.startswith(prefix):
                return target[len(prefix) :]
        raise OutsideHunt(errno.EACCES, "symlink leads out of the hunt", target)

    def _current_config(self, root_fd: int) -> tuple[int, int] | None:
        """The identity of the config file as it is now (it may have been replaced since)."""
        try:
            return _identity(os.stat(CONFIG_FILE, dir_fd=root_fd, follow_symlinks=False))
        except OSError:
            return None

    def _is_readable_file(self, info: os.stat_result, current_config: tuple[int, int] | None) -> bool:
        """A regular file with one link that is not the config (checked by identity, not by name)."""
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            return False
        identity = _identity(info)
        return identity != self._config_identity and identity != current_config

    # --- the backend -----------------------------------------------------------------

    def kind(self, path: str) -> str | None:
        try:
            walk = self._walk(path)
        except OutsideHunt:
            return OUTSIDE
        except (OSError, ValueError):
            return None
        try:
            info = walk.info
            if info is None or stat.S_ISDIR(info.st_mode):
                return DIRECTORY
            return FILE if self._is_readable_file(info, self._current_config(walk.directories[0])) else None
        finally:
            walk.close()

    def listing(self, path: str) -> str | None:
        try:
            walk = self._walk(path)
        except OutsideHunt:
            raise
        except (OSError, ValueError):
            return None
        try:
            directory = walk.directories[-1]
            if walk.name is not None:
                assert walk.info is not None
                if not stat.S_ISDIR(walk.info.st_mode):
                    return None
                directory = os.open(walk.name, _DIRECTORY_FLAGS, dir_fd=directory)
                walk.directories.append(directory)
                if _identity(os.fstat(directory)) != _identity(walk.info):
                    return None  # swapped since it was looked at
            return self._list(path, directory, self._current_config(walk.directories[0]))
        except OutsideHunt:
            raise
        except OSError:
            return None
        finally:
            walk.close()

    def _list(self, path: str, directory: int, current_config: tuple[int, int] | None) -> str:
        files: list[str] = []
        dirs: list[str] = []
        with os.scandir(directory) as entries:
            for entry in entries:
                name = entry.name
                if not is_visible_name(name):
                    continue
                if entry.is_symlink():
                    kind = self.kind(f"{path}/{name}" if path else name)
                elif entry.is_dir(follow_symlinks=False):
                    kind = DIRECTORY
                elif entry.is_file(follow_symlinks=False) and self._is_readable_file(
                    entry.stat(follow_symlinks=False), current_config
                ):
                    kind = FILE
                else:
                    kind = None
                if kind == DIRECTORY:
                    dirs.append(name)
                elif kind == FILE:
                    files.append(name)
        return format_listing(files, dirs)

    def read(self, path: str) -> str | None:
        try:
            walk = self._walk(path)
        except ValueError:
            raise FileNotFoundError(errno.ENOENT, "not readable", path) from None
        try:
            directory, name, info = walk.directories[-1], walk.name, walk.info
            current_config = self._current_config(walk.directories[0])
            if name is None or info is None or not self._is_readable_file(info, current_config):
                raise FileNotFoundError(errno.ENOENT, "no visible regular file", path)
            if info.st_size > MAX_CAT_BYTES:
                return None
            descriptor = os.open(name, _FILE_FLAGS, dir_fd=directory)
            try:
                opened = os.fstat(descriptor)
                if _identity(opened) != _identity(info) or not self._is_readable_file(opened, current_config):
                    raise FileNotFoundError(errno.ENOENT, "changed while being opened", path)
                if opened.st_size > MAX_CAT_BYTES:
                    return None
                data = _read_at_most(descriptor, MAX_CAT_BYTES + 1)
            finally:
                os.close(descriptor)
        finally:
            walk.close()
        if len(data) > MAX_CAT_BYTES:
            return None
        return data.decode("utf-8", "replace")


def _read_at_most(descriptor: int, limit: int) -> bytes:
    chunks = []
    remaining = limit
    while remaining > 0:
        try:
            chunk = os.read(descriptor, remaining)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
