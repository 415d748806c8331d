"""Hostile calls and hostile disks: the hunt never raises, never blocks and never reads outside itself.

The cases of the hardening issue: a hard link to the config, a process that swaps a real
directory with a symlink to an outside directory while the tools run, calls nested too
deeply to parse; and the seed-parity fixes: failed calls carry an empty ``output``,
``check_treasure`` needs only the key, ``resolve_path`` names files that do not exist yet.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import arena_envs  # noqa: F401
from arena_envs.treasure_hunt import (
    BOUNDARY_ERROR,
    CONFIG_FILE,
    MAX_CAT_BYTES,
    NO_TREASURE_ERROR,
    DiskBackend,
    HuntLayout,
    TreasureHunt,
    TreasureHuntVectorEnv,
    execute_tool,
    generate_treasure_hunt,
    resolve_path,
    run_tool_call,
    tool_cat,
    tool_check_treasure,
    tool_ls,
)
from arena_envs.treasure_hunt import tools as hunt_tools

CANARY = "CANARY-0b5e11"


@pytest.fixture
def disk_hunt(tmp_path: Path) -> TreasureHunt:
    return generate_treasure_hunt(tmp_path / "hunt", seed=5, difficulty="easy")


def failed(error: str) -> dict[str, Any]:
    return {"success": False, "output": "", "error": error}


# --- the config through a hard link -----------------------------------------------------


def test_a_hard_link_to_the_config_does_not_reveal_the_key(disk_hunt: TreasureHunt) -> None:
    root = Path(disk_hunt.root)
    key = disk_hunt.config["treasure_key"]
    os.link(root / CONFIG_FILE, root / "notes.txt")
    first = disk_hunt.config["golden_path"][0]
    os.link(root / CONFIG_FILE, root / first / "map.txt")
    for current, name in ((root, "notes.txt"), (root, f"{first}/map.txt"), (root / first, "map.txt")):
        assert tool_cat(current, root, name) == failed(f"File not found: {name}")
    listing = tool_ls(root, root)["output"]
    assert "notes.txt" not in listing.split("\n") and key not in listing
    assert "map.txt" not in tool_ls(root, root, first)["output"].split("\n")
    backend = DiskBackend(root)
    assert backend.kind("notes.txt") is None
    with pytest.raises(FileNotFoundError):
        backend.read("notes.txt")


def test_the_config_is_known_by_identity_even_once_its_name_is_gone(disk_hunt: TreasureHunt) -> None:
    """Linked, then the original name removed: one link left, still the config."""
    root = Path(disk_hunt.root)
    backend = DiskBackend(root)  # what the tools use: it met the config when the hunt was made
    os.link(root / CONFIG_FILE, root / "notes.txt")
    os.unlink(root / CONFIG_FILE)
    assert os.stat(root / "notes.txt").st_nlink == 1
    result = run_tool_call({"tool": "cat", "file": "notes.txt"}, "", backend, disk_hunt.config)
    assert not result.ok and disk_hunt.config["treasure_key"] not in result.text
    result = run_tool_call({"tool": "cat", "file": "notes.txt"}, "", disk_hunt.backend, disk_hunt.config)
    assert not result.ok


def test_hard_linked_hunt_files_are_refused_too(disk_hunt: TreasureHunt) -> None:
    root = Path(disk_hunt.root)
    os.link(root / "start.txt", root / "copy.txt")
    assert tool_cat(root, root, "copy.txt") == failed("File not found: copy.txt")
    assert tool_cat(root, root, "start.txt") == failed("File not found: start.txt")


# --- files that are no regular files, and big ones --------------------------------------


def test_special_files_are_invisible_and_never_block(disk_hunt: TreasureHunt) -> None:
    root = Path(disk_hunt.root)
    os.mkfifo(root / "pipe.txt")
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(root / "sock.txt"))
        made = ["pipe.txt", "sock.txt"]
        try:
            os.mknod(root / "zero.txt", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # like /dev/zero
            made.append("zero.txt")
        except (PermissionError, OSError):
            pass  # no CAP_MKNOD here: the FIFO and the socket still run
        (root / "to_pipe.txt").symlink_to("pipe.txt")
        made.append("to_pipe.txt")
        for name in made:
            assert tool_cat(root, root, name) == failed(f"File not found: {name}")
            assert tool_ls(root, root, name) == failed(f"Directory not found: {name}")
        assert not set(made) & set(tool_ls(root, root)["output"].split("\n"))
    finally:
        server.close()


def test_sparse_huge_files_are_refused_without_reading(disk_hunt: TreasureHunt) -> None:
    root = Path(disk_hunt.root)
    with open(root / "huge.txt", "wb") as handle:
        handle.truncate(1 << 40)  # a terabyte of holes
    (root / "edge.txt").write_bytes(b"x" * MAX_CAT_BYTES)
    assert tool_cat(root, root, "huge.txt") == failed(f"File too large: huge.txt (the limit is {MAX_CAT_BYTES} bytes)")
    assert tool_cat(root, root, "edge.txt") == {"success": True, "output": "x" * MAX_CAT_BYTES}


def test_absolute_symlinks_inside_the_hunt_are_followed_and_outside_refused(
    disk_hunt: TreasureHunt, tmp_path: Path
) -> None:
    root = Path(disk_hunt.root)
    first = disk_hunt.config["golden_path"][0]
    (root / "inside").symlink_to(root / first)
    (root / "outside").symlink_to(tmp_path)
    (root / "back_out").symlink_to(f"{root}/{first}/../..")
    assert tool_ls(root, root, "inside") == tool_ls(root, root, first)
    assert tool_ls(root, root, "outside") == failed(BOUNDARY_ERROR)
    assert tool_ls(root, root, "back_out") == failed(BOUNDARY_ERROR)
    assert tool_cat(root, root, "outside/hunt/start.txt") == failed(BOUNDARY_ERROR)


# --- the check-then-use race ------------------------------------------------------------

SWAPPER = textwrap.dedent(
    """
    import ctypes, ctypes.util, os, sys
    real, link, stop, ready, count = sys.argv[1:6]
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    exchange = getattr(libc, "renameat2", None)
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    open(ready, "w").close()
    swaps = 0
    while swaps < 5_000_000 and not os.path.exists(stop):
        if exchange is not None:
            exchange(AT_FDCWD, real.encode(), AT_FDCWD, link.encode(), RENAME_EXCHANGE)
        else:  # two renames: the directory and the symlink trade places, not atomically
            os.rename(real, real + ".tmp"); os.rename(link, real); os.rename(real + ".tmp", link)
        swaps += 1
    with open(count, "w") as handle:
        handle.write(str(swaps))
    """
)


@pytest.mark.parametrize("api", ["seed_api", "run_tool_call"])
def test_a_concurrent_swapper_never_gets_outside_content(tmp_path: Path, api: str) -> None:
    """A process exchanges a real directory of the hunt with a symlink to an outside
    directory as fast as it can while ``cat`` and ``ls`` read through it: every answer is
    the inside file, the inside listing or an error, never the outside."""
    hunt = generate_treasure_hunt(tmp_path / "hunt", seed=9)
    root = Path(hunt.root)
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "clue.txt").write_text(CANARY)
    (outside / "sub" / f"{CANARY}.txt").write_text(CANARY)
    (root / "room" / "sub").mkdir(parents=True)
    (root / "room" / "sub" / "clue.txt").write_text("inside")
    (root / "decoy").symlink_to(outside)
    stop, ready, count = tmp_path / "stop", tmp_path / "ready", tmp_path / "count"
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(root / "room"), str(root / "decoy"), str(stop), str(ready), str(count)]
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ready.exists(), "the swapper did not start"
        outcomes = {"inside": 0, "error": 0}
        for attempt in range(1500):
            if api == "seed_api":
                answers = [
                    tool_cat(root, root, "room/sub/clue.txt"),
                    tool_ls(root, root, "room/sub"),
                    tool_cat(root / "room", root, "sub/clue.txt"),
                ]
                texts = [json.dumps(answer) for answer in answers]
                good = [answer["success"] for answer in answers]
            else:
                results = [
                    run_tool_call({"tool": "cat", "file": "/room/sub/clue.txt"}, "", hunt.backend, hunt.config),
                    run_tool_call({"tool": "ls", "path": "room/sub"}, "", hunt.backend, hunt.config),
                    run_tool_call('{"tool": "cd", "path": "room/sub"}', "", hunt.backend, hunt.config),
                ]
                texts = [result.text for result in results]
                good = [result.ok for result in results]
            for text, ok in zip(texts, good, strict=True):
                assert CANARY not in text, f"outside content returned on attempt {attempt}: {text}"
                outcomes["inside" if ok else "error"] += 1
        assert swapper.poll() is None, "the swapper stopped early"
        assert outcomes["inside"] + outcomes["error"] == 4500
    finally:
        stop.touch()
        swapper.wait(timeout=30)
    assert int(count.read_text()) >= 100, "the swapper hardly ran: the race was not exercised"


# --- calls nested too deeply ------------------------------------------------------------


def deep_call(depth: int) -> str:
    return '{"tool":"ls","thought":' + "[" * depth + "]" * depth + "}"


def at_stack_depth(frames: int, function: Any) -> Any:
    return function() if frames <= 0 else at_stack_depth(frames - 1, function)


def test_deeply_nested_json_is_an_error_observation_at_any_stack_depth() -> None:
    env = gym.make("arena_envs/TreasureHunt-v0")
    env.reset(seed=3)
    headroom = sys.getrecursionlimit() - len(__import__("inspect").stack()) - 120
    for frames in range(0, max(headroom, 1), max(headroom // 6, 1)):
        for depth in (50, 500, 985, 1000, 2000, 5000):
            observation, reward, terminated, truncated, _ = at_stack_depth(
                frames, lambda depth=depth: env.step(deep_call(depth))
            )
            assert observation.startswith("Error: Invalid tool call"), (frames, depth, observation[:80])
            assert reward == pytest.approx(-0.01) and not terminated
            if truncated:
                env.reset(seed=3)


def test_a_parser_that_blows_the_stack_is_caught_at_the_env_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the parser does with depth, the env turns a RecursionError into an error observation."""

    def recurse(raw: Any) -> Any:
        return recurse(raw)

    monkeypatch.setattr(hunt_tools, "parse_decision", recurse)
    env = gym.make("arena_envs/TreasureHunt-v0")
    env.reset(seed=1)
    observation, reward, terminated, truncated, info = env.step(deep_call(985))
    assert observation.startswith(f"Error: {hunt_tools.TOO_DEEP_ERROR}")
    assert (reward, terminated, truncated, info["turns"]) == (pytest.approx(-0.01), False, False, 1)
    envs = TreasureHuntVectorEnv(num_envs=2)
    envs.reset(seed=1)
    observations, *_ = envs.step([deep_call(985), "{}"])
    assert all(observation.startswith("Error: Invalid tool call") for observation in observations)


# --- seed parity: output on failure, check_treasure, resolve_path -----------------------


def test_failed_calls_carry_an_empty_output(disk_hunt: TreasureHunt) -> None:
    root = Path(disk_hunt.root)
    for call in (
        {"tool": "cat", "file": "nope.txt"},
        {"tool": "rm"},
        "{broken",
        {"tool": "check_treasure", "key": "x"},
    ):
        result = execute_tool(call, root, root, disk_hunt.config)
        assert result["success"] is False and result["output"] == "" and result["error"], result
    result, new_dir = execute_tool({"tool": "cd", "path": "./ghost"}, root, root, disk_hunt.config)
    assert result == failed("Directory not found: ./ghost") and new_dir == root


def test_check_treasure_needs_only_the_key(tmp_path: Path) -> None:
    layout = HuntLayout.from_files(
        {
            "start.txt": "Next clue: ./final/treasure.txt",
            "final/treasure.txt": "Treasure key: correct_key_123",
            "decoy/treasure.txt": "Treasure key: something_else",
        },
        directories=("empty",),
    )
    layout.write(tmp_path)
    config = {"treasure_key": "correct_key_123"}
    assert tool_check_treasure(tmp_path / "final", tmp_path, config, "correct_key_123") == {
        "success": True,
        "output": "TREASURE FOUND! You win!",
    }
    assert tool_check_treasure(tmp_path / "final", tmp_path, config, "wrong")["error"] == "Incorrect treasure key"
    for elsewhere in (tmp_path, tmp_path / "decoy", tmp_path / "empty"):
        assert tool_check_treasure(elsewhere, tmp_path, config, "correct_key_123") == failed(NO_TREASURE_ERROR)
    for bad_config in ({}, {"treasure_key": 5}, None):
        with pytest.raises(ValueError, match="treasure_key"):
            tool_check_treasure(tmp_path / "final", tmp_path, bad_config, "correct_key_123")  # type: ignore[arg-type]


def test_resolve_path_names_files_that_do_not_exist_yet(disk_hunt: TreasureHunt, tmp_path: Path) -> None:
    hunt = Path("/hunt")  # the seed's example, on no disk at all
    assert resolve_path(hunt / "dir", hunt, "../other/file.txt") == hunt / "other/file.txt"
    assert resolve_path(hunt / "dir", hunt, "/a/b/c.txt") == hunt / "a/b/c.txt"
    assert resolve_path(hunt / "dir", hunt, "../../etc/passwd") is None
    assert resolve_path(Path("/elsewhere"), hunt, "file.txt") is None
    root = Path(disk_hunt.root)
    first = disk_hunt.config["golden_path"][0]
    assert resolve_path(root / first / "not_yet", root, "../new.txt") == root / first / "new.txt"
    (root / "out").symlink_to(tmp_path)
    assert resolve_path(root, root, "out/new.txt") is None
    assert resolve_path(root / "out", root, "x.txt") is None
    assert resolve_path(root / "out", root, "../start.txt") == root / "start.txt"


def test_the_vector_env_keeps_stepping_after_hostile_calls() -> None:
    envs = TreasureHuntVectorEnv(num_envs=3)
    envs.reset(seed=4)
    hostile = [deep_call(5000), {"tool": "cat", "file": "\x00" * 10_000}, {"tool": "ls", "path": "../" * 3000}]
    observations, rewards, terminations, truncations, infos = envs.step(hostile)
    assert all(observation.startswith("Error: ") for observation in observations)
    assert np.all(rewards == -0.01) and not terminations.any() and not truncations.any()
    observations, *_ = envs.step([{"tool": "cat", "file": "start.txt"}] * 3)
    assert all(
        observation.startswith(("Next clue", "Follow", "The next", "Your journey", "Look"))
        for observation in observations
    )
