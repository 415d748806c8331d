"""Generated hostile paths and calls for every Treasure Hunt tool, on both backends (issue 16).

A disk hunt is planted with symlinks out of the hunt (relative and absolute), loops, links
to the config and to hidden directories, a hard link to the config, a FIFO and a socket,
next to an outside directory holding a canary. Hypothesis then throws paths at every tool
(``..`` chains, absolute paths, NUL bytes and other control characters, unicode, huge
paths, the planted names) from every directory, through the seed API, ``run_tool_call``
and the environments. Invariants: nothing raises, every answer has the documented shape
and one of the documented messages, no answer holds outside or config content, a ``cd``
only ever lands in a visible directory of the hunt, the disk is never written, and the
memory backend answers like the disk one wherever the planted entries play no part.

Bounded for ``make test``; ``ARENA_FUZZ_EXAMPLES=5000`` (say) makes a soak of it.
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import arena_envs  # noqa: F401
from arena_envs.treasure_hunt import (
    BOUNDARY_ERROR,
    CONFIG_FILE,
    INCORRECT_KEY_ERROR,
    NO_TREASURE_ERROR,
    TreasureHunt,
    execute_tool,
    generate_treasure_hunt,
    resolve_path,
    run_tool_call,
    tool_cat,
    tool_cd,
    tool_check_treasure,
    tool_ls,
    tool_pwd,
)

EXAMPLES = int(os.environ.get("ARENA_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
CANARY = "CANARY-fuzz-3d1c"
PLANTED = [
    "escape_rel",
    "escape_abs",
    "escape_file.txt",
    "etc_link",
    "loop_a",
    "loop_b",
    "self_loop",
    "config_link.txt",
    "config_hardlink.txt",
    "hidden_link",
    "dangling",
    "pipe",
    "sock",
    "up_and_out",
]
# Every message a tool may answer with, as a pattern over the whole error.
KNOWN_ERRORS = re.compile(
    "|".join(
        [
            re.escape(BOUNDARY_ERROR),
            re.escape(INCORRECT_KEY_ERROR),
            re.escape(NO_TREASURE_ERROR),
            r"Directory not found: .*",
            r"File not found: .*",
            r"File too large: .*",
            r"Unknown tool: .*",
            r"Invalid tool call: .*",
        ]
    ),
    re.DOTALL,
)


def plant(hunt: TreasureHunt, outside: Path) -> None:
    root = Path(hunt.root)
    (root / "escape_rel").symlink_to(os.path.relpath(outside, root))
    (root / "escape_abs").symlink_to(outside)
    (root / "escape_file.txt").symlink_to(outside / "secret.txt")
    (root / "etc_link").symlink_to("/etc")
    (root / "loop_a").symlink_to("loop_b")
    (root / "loop_b").symlink_to("loop_a")
    (root / "self_loop").symlink_to("self_loop")
    (root / "config_link.txt").symlink_to(CONFIG_FILE)
    os.link(root / CONFIG_FILE, root / "config_hardlink.txt")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "inside.txt").write_text(CANARY)
    (root / "hidden_link").symlink_to(".hidden")
    (root / "dangling").symlink_to("nowhere")
    (root / "up_and_out").symlink_to(f"{hunt.config['golden_path'][0]}/../..")
    os.mkfifo(root / "pipe")
    deep = root / hunt.config["golden_path"][1]
    (deep / "escape_deep").symlink_to(os.path.relpath(outside, deep))


@pytest.fixture(scope="module")
def hunts(tmp_path_factory: pytest.TempPathFactory) -> Any:
    base = tmp_path_factory.mktemp("fuzz")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(CANARY)
    (outside / f"{CANARY}.txt").write_text(CANARY)
    disk = generate_treasure_hunt(base / "hunt", seed=21, difficulty="medium")
    plant(disk, outside)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(Path(disk.root) / "sock"))
    memory = generate_treasure_hunt(seed=21, difficulty="medium")
    before = snapshot(base)
    yield memory, disk
    after = snapshot(base)
    server.close()
    assert after == before, "a tool wrote to the disk"


def snapshot(base: Path) -> dict[str, tuple[int, int]]:
    state = {}
    for current, dir_names, file_names in os.walk(base):
        for name in dir_names + file_names:
            info = os.lstat(Path(current) / name)
            state[os.path.join(current, name)] = (info.st_mode, info.st_mtime_ns)
    return state


# --- strategies -------------------------------------------------------------------------

ODD_CHARACTERS = st.sampled_from(["\x00", "\n", "\t", "\x1b", "\\", "\u202e", "\uff0e", "\u2215", "\udcff", "é", "~"])
SEGMENTS = st.one_of(
    st.sampled_from(["..", ".", "", "...", CONFIG_FILE, ".hidden", "start.txt", "treasure.txt", *PLANTED]),
    st.text(st.characters(codec="utf-8"), max_size=12),
    st.text(ODD_CHARACTERS, min_size=1, max_size=3),
    st.from_regex(r"[a-z]{1,8}", fullmatch=True),
)


def paths(hunt: TreasureHunt) -> st.SearchStrategy[str]:
    names = sorted(
        {part for path in [*hunt.layout.files, *hunt.layout.directories] for part in path.split("/") if part}
    )
    segment = st.one_of(SEGMENTS, st.sampled_from(names))
    joined = st.lists(segment, max_size=8).map("/".join)
    return st.one_of(
        joined,
        joined.map(lambda path: "/" + path),
        st.integers(1, 3000).map(lambda count: "../" * count + "etc/passwd"),
        st.integers(1000, 20_000).map(lambda size: "a" * size),
        st.sampled_from(["/etc/passwd", "/proc/self/environ", "/dev/zero", "~/.ssh/id_rsa", "%2e%2e/%2e%2e"]),
        st.text(max_size=40),
    )


def directories(hunt: TreasureHunt) -> st.SearchStrategy[str]:
    return st.sampled_from(sorted(hunt.layout.directories) + ["escape_rel", "hidden_link", "etc_link", "nope"])


def as_seen(text: str) -> bool:
    """Whether a tool's text leaks what it must not: outside content or the config."""
    return CANARY not in text and '"golden_path"' not in text and '"clue_chain"' not in text


def check_result(result: dict[str, Any]) -> None:
    assert isinstance(result["success"], bool)
    assert isinstance(result["output"], str)
    if result["success"]:
        assert set(result) == {"success", "output"}
        assert as_seen(result["output"])
    else:
        assert set(result) == {"success", "output", "error"} and result["output"] == ""
        assert KNOWN_ERRORS.fullmatch(result["error"]), result["error"]
        assert as_seen(result["error"])


def check_new_directory(hunt: TreasureHunt, result: dict[str, Any], new_dir: Any, start: Any) -> None:
    if not result["success"]:
        assert new_dir == start
        return
    relative = Path(new_dir).relative_to(hunt.root).as_posix()
    relative = "" if relative == "." else relative
    assert relative in hunt.layout.directories, relative  # only the hunt's own directories


# --- the seed API on disk ---------------------------------------------------------------


@FUZZ
@given(data=st.data())
def test_every_tool_refuses_hostile_paths_on_disk(hunts: Any, data: st.DataObject) -> None:
    _, disk = hunts
    root = Path(disk.root)
    cwd = data.draw(directories(disk), label="cwd")
    start = root / cwd if cwd else root
    path = data.draw(paths(disk), label="path")
    check_result(tool_pwd(start, root))
    result, new_dir = tool_cd(start, root, path)
    check_result(result)
    check_new_directory(disk, result, new_dir, start)
    check_result(tool_ls(start, root, path))
    check_result(tool_cat(start, root, path))
    check_result(tool_check_treasure(start, root, disk.config, path))
    for call in (
        {"tool": "cat", "file": path},
        json.dumps({"tool": "ls", "path": path}),
        {"name": "cd", "arguments": {"path": path}},
    ):
        result = execute_tool(call, start, root, disk.config)
        if isinstance(result, tuple):
            result, new_dir = result
            check_new_directory(disk, result, new_dir, start)
        check_result(result)
    resolved = resolve_path(start, root, path)
    if resolved is not None:
        assert Path(resolved).is_relative_to(root)


# --- memory and disk agree where nothing is planted -------------------------------------


@FUZZ
@given(data=st.data())
def test_memory_and_disk_agree_on_hostile_paths(hunts: Any, data: st.DataObject) -> None:
    memory, disk = hunts
    cwd = data.draw(st.sampled_from(sorted(memory.layout.directories)), label="cwd")
    path = data.draw(paths(memory), label="path")
    if any(name in path for name in (*PLANTED, "escape_deep", ".hidden")):
        return  # the planted entries exist on disk only
    for tool, key in (("cd", "path"), ("ls", "path"), ("cat", "file"), ("check_treasure", "key")):
        answers = [run_tool_call({"tool": tool, key: path}, cwd, hunt.backend, hunt.config) for hunt in hunts]
        assert answers[0] == answers[1], (tool, path)


# --- the environments -------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


def actions(hunt: TreasureHunt) -> st.SearchStrategy[Any]:
    tool = st.sampled_from(["pwd", "cd", "ls", "cat", "check_treasure", "give_up", "rm", "", "\x00"])
    key = st.sampled_from(["path", "file", "key", "arguments", "params"])
    call = st.builds(lambda t, k, p: {"tool": t, k: p}, tool, key, st.one_of(paths(hunt), JSON_VALUES))
    return st.one_of(
        call,
        call.map(json.dumps),
        st.text(max_size=200),
        JSON_VALUES,
        st.binary(max_size=50),
        st.integers(1, 3000).map(lambda depth: '{"tool":"ls","thought":' + "[" * depth + "]" * depth + "}"),
    )


@pytest.mark.parametrize("backend", ["memory", "disk"])
@settings(FUZZ, max_examples=max(EXAMPLES // 3, 1))
@given(data=st.data())
def test_the_env_never_raises_and_stays_in_its_spaces(backend: str, hunts: Any, data: st.DataObject) -> None:
    env = gym.make("arena_envs/TreasureHunt-v0", backend=backend, max_steps=8, difficulty="easy")
    try:
        observation, _ = env.reset(seed=21)
        if backend == "disk":
            outside = Path(hunts[1].root).parent / "outside"  # holds the canary
            (Path(env.unwrapped.hunt.root) / "escape_rel").symlink_to(outside)
        for action in data.draw(st.lists(actions(hunts[0]), min_size=1, max_size=8), label="actions"):
            observation, reward, terminated, truncated, info = env.step(action)
            assert env.observation_space.contains(observation)
            assert as_seen(observation)
            assert reward in (-0.01, 0.99, 0.0)
            if terminated or truncated:
                observation, _ = env.reset()
    finally:
        env.close()
