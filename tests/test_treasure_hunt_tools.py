"""The game tools of the seed API, run against both backends, and an attack corpus of hostile paths."""

from __future__ import annotations

import json
import os
import posixpath
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arena_envs.tools import Decision, ToolCallError
from arena_envs.treasure_hunt import (
    BOUNDARY_ERROR,
    CONFIG_FILE,
    HUNT_TOOLS,
    INCORRECT_KEY_ERROR,
    MAX_CAT_BYTES,
    NO_TREASURE_ERROR,
    TREASURE_HUNT_TOOL_SCHEMAS,
    DiskBackend,
    HuntLayout,
    MemoryBackend,
    TreasureHunt,
    execute_tool,
    generate_treasure_hunt,
    is_path_safe,
    resolve_path,
    tool_cat,
    tool_cd,
    tool_check_treasure,
    tool_ls,
    tool_pwd,
)

SEED = 11
BACKENDS = ("memory", "disk")


def make_hunt(backend: str, base: Path, seed: int = SEED, difficulty: str = "medium") -> TreasureHunt:
    return generate_treasure_hunt(None if backend == "memory" else base / "hunt", seed=seed, difficulty=difficulty)


@pytest.fixture(params=BACKENDS)
def hunt(request: pytest.FixtureRequest, tmp_path: Path) -> TreasureHunt:
    return make_hunt(request.param, tmp_path)


def root_argument(hunt: TreasureHunt) -> Any:
    """What a caller passes as ``hunt_root``: the seed's root Path on disk, the hunt in memory."""
    return hunt if hunt.in_memory else hunt.root


def listing(hunt: TreasureHunt, directory: str) -> str:
    files, dirs = hunt.layout.directories[directory]
    return "\n".join(sorted(files) + [f"{name}/" for name in sorted(dirs)])


def failed(error: str) -> dict[str, Any]:
    """A failed call as the seed lists it: no output, an error."""
    return {"success": False, "output": "", "error": error}


def location(hunt: TreasureHunt, relative: str) -> Any:
    return hunt.root / relative if relative else hunt.root


# --- pwd and cd -------------------------------------------------------------------------


def test_pwd_at_the_root_and_below(hunt: TreasureHunt) -> None:
    root = root_argument(hunt)
    assert tool_pwd(hunt.root, root) == {"success": True, "output": "/"}
    deep = hunt.config["golden_path"][2]
    assert tool_pwd(location(hunt, deep), root) == {"success": True, "output": f"/{deep}"}


def test_cd_relative_absolute_and_parent(hunt: TreasureHunt) -> None:
    root = root_argument(hunt)
    first, second = hunt.config["golden_path"][:2]
    result, here = tool_cd(hunt.root, root, f"./{first}")
    assert result == {"success": True, "output": f"Changed to /{first}"}
    assert here == location(hunt, first)
    result, here = tool_cd(here, root, second.rpartition("/")[2])
    assert result == {"success": True, "output": f"Changed to /{second}"}
    assert here == location(hunt, second)
    result, here = tool_cd(here, root, "..")
    assert (result["output"], here) == (f"Changed to /{first}", location(hunt, first))
    result, here = tool_cd(here, root, "/")
    assert (result["output"], here) == ("Changed to /", hunt.root)
    result, here = tool_cd(hunt.root, root, f"/{second}")
    assert (result["output"], here) == (f"Changed to /{second}", location(hunt, second))
    result, here = tool_cd(here, root, f"../../{first}/./")
    assert (result["output"], here) == (f"Changed to /{first}", location(hunt, first))


def test_cd_failures_keep_the_directory(hunt: TreasureHunt) -> None:
    root = root_argument(hunt)
    start = location(hunt, hunt.config["golden_path"][0])
    assert tool_cd(start, root, "./nowhere") == (failed("Directory not found: ./nowhere"), start)
    clue = posixpath.basename(hunt.config["clue_chain"][1])
    assert tool_cd(start, root, clue) == (
        {"success": False, "output": "", "error": f"Directory not found: {clue}"},
        start,
    )
    assert tool_cd(start, root, "../..") == (failed(BOUNDARY_ERROR), start)


# --- ls ---------------------------------------------------------------------------------


def test_ls_lists_files_then_directories(hunt: TreasureHunt) -> None:
    root = root_argument(hunt)
    result = tool_ls(hunt.root, root)
    assert result == {"success": True, "output": listing(hunt, "")}
    lines = result["output"].split("\n")
    files = [line for line in lines if not line.endswith("/")]
    dirs = [line for line in lines if line.endswith("/")]
    assert "start.txt" in files and dirs
    assert lines == sorted(files) + sorted(dirs)
    for directory in hunt.layout.directories:
        assert tool_ls(location(hunt, directory), root) == {"success": True, "output": listing(hunt, directory)}


def test_ls_with_a_path(hunt: TreasureHunt) -> None:
    root = root_argument(hunt)
    first, second = hunt.config["golden_path"][:2]
    assert tool_ls(hunt.root, root, f"./{first}")["output"] == listing(hunt, first)
    assert tool_ls(location(hunt, second), root, "..")["output"] == listing(hunt, first)
    assert tool_ls(location(hunt, second), root, "/")["output"] == listing(hunt, "")
    assert tool_ls(hunt.root, root, "ghost") == failed("Directory not found: ghost")
    assert tool_ls(hunt.root, root, "start.txt") == failed("Directory not found: start.txt")


def test_ls_never_shows_the_config_or_dot_files(tmp_path: Path) -> None:
    hunt = make_hunt("disk", tmp_path)
    (hunt.root / ".hidden_notes.txt").write_text("secret")
    (hunt.root / ".cache").mkdir()
    output = tool_ls(hunt.root, hunt.root)["output"]
    assert output == listing(hunt, "")
    assert CONFIG_FILE not in output and ".hidden" not in output and ".cache" not in output


# --- cat --------------------------------------------------------------------------------


def test_cat_reads_clues_by_relative_and_absolute_path(hunt: TreasureHunt) -> None:
    root = root_argument(hunt)
    files = hunt.layout.files
    assert tool_cat(hunt.root, root, "start.txt") == {"success": True, "output": files["start.txt"]}
    clue = hunt.config["clue_chain"][2]
    assert tool_cat(hunt.root, root, f"./{clue}")["output"] == files[clue]
    assert tool_cat(location(hunt, hunt.config["golden_path"][3]), root, f"/{clue}")["output"] == files[clue]
    assert tool_cat(location(hunt, posixpath.dirname(clue)), root, posixpath.basename(clue))["output"] == files[clue]


def test_cat_failures(hunt: TreasureHunt) -> None:
    root = root_argument(hunt)
    assert tool_cat(hunt.root, root, "clue.txt") == failed("File not found: clue.txt")
    first = hunt.config["golden_path"][0]
    assert tool_cat(hunt.root, root, first) == {"success": False, "output": "", "error": f"File not found: {first}"}
    assert tool_cat(hunt.root, root, "../start.txt") == failed(BOUNDARY_ERROR)
    result = tool_cat(hunt.root, root, "")
    assert not result["success"]
    assert result["error"].startswith("Invalid tool call: cat: 'file' must have at least 1 character")


def custom_hunt(layout: HuntLayout, backend: str, base: Path) -> tuple[Any, Any]:
    """``(start directory, hunt_root)`` of a hand-made layout on either backend."""
    if backend == "memory":
        return PurePosixPath("/"), MemoryBackend(layout.directories, layout.files)
    layout.write(base)
    return base, base


@pytest.mark.parametrize("backend", BACKENDS)
def test_cat_has_a_size_limit(backend: str, tmp_path: Path) -> None:
    layout = HuntLayout.from_files(
        {"big.txt": "x" * (MAX_CAT_BYTES + 1), "fits.txt": "y" * MAX_CAT_BYTES, "wide.txt": "é" * MAX_CAT_BYTES}
    )
    start, root = custom_hunt(layout, backend, tmp_path)
    assert tool_cat(start, root, "big.txt") == {
        "success": False,
        "output": "",
        "error": f"File too large: big.txt (the limit is {MAX_CAT_BYTES} bytes)",
    }
    assert tool_cat(start, root, "wide.txt")["success"] is False
    assert tool_cat(start, root, "fits.txt") == {"success": True, "output": "y" * MAX_CAT_BYTES}


@pytest.mark.parametrize("backend", BACKENDS)
def test_dot_files_are_invisible_in_any_layout(backend: str, tmp_path: Path) -> None:
    secret = "hidden text"
    layout = HuntLayout.from_files(
        {".secret.txt": secret, ".cache/inner.txt": secret, "dir/.hidden": secret, "visible.txt": "hello"}
    )
    start, root = custom_hunt(layout, backend, tmp_path)
    assert tool_ls(start, root) == {"success": True, "output": "visible.txt\ndir/"}
    assert tool_ls(start, root, "dir") == {"success": True, "output": ""}
    for path in (".secret.txt", "./.secret.txt", "/.cache/inner.txt", "dir/.hidden", "dir/../.secret.txt"):
        assert tool_cat(start, root, path) == {"success": False, "output": "", "error": f"File not found: {path}"}
    for path in (".cache", "/.cache/"):
        assert tool_cd(start, root, path) == (
            {"success": False, "output": "", "error": f"Directory not found: {path}"},
            start,
        )
        assert tool_ls(start, root, path) == {"success": False, "output": "", "error": f"Directory not found: {path}"}


# --- check_treasure ---------------------------------------------------------------------


def test_check_treasure_needs_the_directory_and_the_key(hunt: TreasureHunt) -> None:
    root = root_argument(hunt)
    key = hunt.config["treasure_key"]
    treasure_dir = location(hunt, posixpath.dirname(hunt.config["treasure_path"]))
    parent = location(hunt, hunt.config["golden_path"][-2])
    assert tool_check_treasure(hunt.root, root, hunt.config, key) == failed(NO_TREASURE_ERROR)
    assert tool_check_treasure(parent, root, hunt.config, key) == failed(NO_TREASURE_ERROR)
    assert tool_check_treasure(treasure_dir, root, hunt.config, "0" * 16) == {
        "success": False,
        "output": "",
        "error": INCORRECT_KEY_ERROR,
    }
    assert tool_check_treasure(treasure_dir, root, hunt.config, key[:-1]) == {
        "success": False,
        "output": "",
        "error": INCORRECT_KEY_ERROR,
    }
    assert tool_check_treasure(treasure_dir, root, hunt.config, key) == {
        "success": True,
        "output": "TREASURE FOUND! You win!",
    }
    assert tool_check_treasure(treasure_dir, root, hunt.config, f" {key}\n")["success"] is True


def test_check_treasure_fails_when_the_treasure_file_is_gone(tmp_path: Path) -> None:
    hunt = make_hunt("disk", tmp_path)
    (hunt.root / hunt.config["treasure_path"]).unlink()
    treasure_dir = hunt.root / posixpath.dirname(hunt.config["treasure_path"])
    result = tool_check_treasure(treasure_dir, hunt.root, hunt.config, hunt.config["treasure_key"])
    assert result == failed(NO_TREASURE_ERROR)


def test_check_treasure_without_a_config_is_a_programming_error(hunt: TreasureHunt) -> None:
    with pytest.raises(ValueError, match="config"):
        tool_check_treasure(hunt.root, root_argument(hunt), {}, "key")


# --- execute_tool -----------------------------------------------------------------------


def test_execute_tool_follows_the_seed_examples(hunt: TreasureHunt) -> None:
    root = root_argument(hunt)
    assert execute_tool({"tool": "pwd"}, hunt.root, root, hunt.config) == {"success": True, "output": "/"}
    assert execute_tool({"tool": "ls"}, hunt.root, root, hunt.config)["output"] == listing(hunt, "")
    start = execute_tool({"tool": "cat", "file": "start.txt"}, hunt.root, root, hunt.config)
    assert start == {"success": True, "output": hunt.layout.files["start.txt"]}
    first = hunt.config["golden_path"][0]
    result, new_dir = execute_tool({"tool": "cd", "path": f"./{first}"}, hunt.root, root, hunt.config)
    assert result == {"success": True, "output": f"Changed to /{first}"}
    assert new_dir == location(hunt, first)
    clue = hunt.config["clue_chain"][1]
    assert (
        execute_tool({"tool": "cat", "file": posixpath.basename(clue)}, new_dir, root, hunt.config)["output"]
        == (hunt.layout.files[clue])
    )
    assert execute_tool({"tool": "invalid_tool"}, hunt.root, root, hunt.config) == {
        "success": False,
        "output": "",
        "error": "Unknown tool: invalid_tool",
    }


def test_execute_tool_plays_a_whole_hunt(hunt: TreasureHunt) -> None:
    root = root_argument(hunt)
    here = hunt.root
    for clue in hunt.config["clue_chain"][1:]:
        result, here = execute_tool({"tool": "cd", "path": f"/{posixpath.dirname(clue)}"}, here, root, hunt.config)
        assert result["success"]
        assert execute_tool({"tool": "cat", "file": posixpath.basename(clue)}, here, root, hunt.config)["success"]
    key = hunt.layout.files[hunt.config["treasure_path"]].rsplit(" ", 1)[1]
    assert execute_tool({"tool": "check_treasure", "key": key}, here, root, hunt.config)["success"]


@pytest.mark.parametrize(
    "tool_call",
    [
        '{"tool": "cat", "file": "start.txt"}',
        b'{"tool": "cat", "file": "start.txt"}',
        '```json\n{"tool": "cat", "file": "start.txt"}\n```',
        {"name": "cat", "arguments": {"file": "start.txt"}},
        {"name": "cat", "arguments": '{"file": "start.txt"}'},
        {"tool": "cat", "params": {"file": "start.txt"}},
        {"tool": "cat", "parameters": {"file": "start.txt"}},
        {"type": "function", "function": {"name": "cat", "arguments": '{"file": "start.txt"}'}},
        {"tool": "cat", "path": "start.txt"},
        # read by arena_envs.tools.parse_decision, like every other tool call in the package
        'I will read the first clue: {"tool": "cat", "file": "start.txt"}',
        {"tool_calls": [{"type": "function", "function": {"name": "cat", "arguments": '{"file": "start.txt"}'}}]},
        {"action": "cat", "action_input": {"file": "start.txt"}},
        {"tool": " cat ", "file": "start.txt"},
        Decision("cat", {"file": "start.txt"}, "the first clue"),
        # what the hunt forgives beyond its schemas: nulls, keys that are no parameter
        {"tool": "cat", "file": "start.txt", "note": "first"},
        {"tool": "cat", "file": None, "path": "start.txt"},
    ],
)
def test_execute_tool_accepts_the_common_tool_call_forms(hunt: TreasureHunt, tool_call: Any) -> None:
    result = execute_tool(tool_call, hunt.root, root_argument(hunt), hunt.config)
    assert result == {"success": True, "output": hunt.layout.files["start.txt"]}


class DecisionLike:
    def to_dict(self) -> dict[str, Any]:
        return {"tool": "pwd", "params": {}, "reasoning": "where am I?"}


def test_execute_tool_accepts_an_object_with_to_dict(hunt: TreasureHunt) -> None:
    assert execute_tool(DecisionLike(), hunt.root, root_argument(hunt), hunt.config) == {"success": True, "output": "/"}


@pytest.mark.parametrize(
    ("tool_call", "error"),
    [
        ({"tool": "rm", "path": "/"}, "Unknown tool: rm"),
        ('{"tool": "rm", "path": "/"}', "Unknown tool: rm"),
        ({"name": "rm", "arguments": "{broken"}, "Unknown tool: rm"),
        ({"tool": "x" * 500}, "Unknown tool: " + "x" * 64 + "..."),
        ({"tool": "bad\x00name\u202e"}, "Unknown tool: bad?name?"),
        (Decision("rm"), "Unknown tool: rm"),
    ],
)
def test_unknown_tools_get_the_seed_error(hunt: TreasureHunt, tool_call: Any, error: str) -> None:
    result = execute_tool(tool_call, hunt.root, root_argument(hunt), hunt.config)
    assert result == failed(error)


@pytest.mark.parametrize(
    ("tool_call", "reason"),
    [
        (None, "expected model output as text, a dict or a Decision"),
        (42, "expected model output as text, a dict or a Decision"),
        (["ls"], "expected model output as text, a dict or a Decision"),
        ("", "model output is empty"),
        ("[" * 100_000, "too deeply"),
        (b"\xff\xfe", "not UTF-8"),
        ('"just a string"', "no JSON tool call found"),
        ({}, "no tool name found"),
        ({"tool": 7}, "tool name must be a non-empty string, got 7"),
        ({"tool": "cd"}, "cd: missing required parameter 'path'"),
        ({"tool": "cd", "path": 5}, "cd: 'path' must be a string"),
        ({"tool": "cd", "path": ["a"]}, "cd: 'path' must be a string"),
        ({"tool": "cat"}, "cat: missing required parameter 'file'"),
        ({"tool": "cat", "file": {"a": 1}}, "cat: 'file' must be a string"),
        ({"tool": "ls", "path": 3.5}, "ls: 'path' must be a string"),
        ({"tool": "check_treasure"}, "check_treasure: missing required parameter 'key'"),
        ({"tool": "check_treasure", "key": 1234}, "check_treasure: 'key' must be a string"),
        ({"name": "cat", "arguments": "{not json"}, "arguments of 'cat' are not valid JSON"),
        ({"name": "cat", "arguments": [1, 2]}, "arguments of 'cat' must be a JSON object"),
    ],
)
def test_execute_tool_turns_bad_calls_into_errors(hunt: TreasureHunt, tool_call: Any, reason: str) -> None:
    """Malformed calls: "Invalid tool call: " and the reason the shared tool-calling layer gives."""
    result = execute_tool(tool_call, hunt.root, root_argument(hunt), hunt.config)
    if isinstance(result, tuple):
        result, new_dir = result
        assert new_dir == hunt.root
    assert result["success"] is False and set(result) == {"success", "output", "error"} and result["output"] == ""
    assert result["error"].startswith("Invalid tool call: ") and reason in result["error"], result["error"]


@pytest.mark.parametrize("arguments", ["{broken", "[1, 2]", 7])
def test_a_malformed_cd_still_returns_the_directory(hunt: TreasureHunt, arguments: Any) -> None:
    first = location(hunt, hunt.config["golden_path"][0])
    result, new_dir = execute_tool({"name": "cd", "arguments": arguments}, first, root_argument(hunt), hunt.config)
    assert new_dir == first
    assert not result["success"] and result["error"].startswith("Invalid tool call")


def test_give_up_is_a_tool(hunt: TreasureHunt) -> None:
    assert execute_tool({"tool": "give_up"}, hunt.root, root_argument(hunt), hunt.config) == {
        "success": True,
        "output": "You gave up the treasure hunt.",
    }


def test_a_current_directory_outside_the_hunt_is_refused(tmp_path: Path) -> None:
    hunt = make_hunt("disk", tmp_path)
    assert execute_tool('{"tool": "ls"}', hunt.root, hunt.root, hunt.config)["success"]  # now a memoized text
    for outside in (tmp_path, Path("/etc"), hunt.root / ".." / "elsewhere"):
        assert execute_tool('{"tool": "ls"}', outside, hunt.root, hunt.config) == {
            "success": False,
            "output": "",
            "error": BOUNDARY_ERROR,
        }
        assert tool_ls(outside, hunt.root) == failed(BOUNDARY_ERROR)
        assert tool_pwd(outside, hunt.root) == failed(BOUNDARY_ERROR)
        assert tool_cd(outside, hunt.root, "/") == (failed(BOUNDARY_ERROR), outside)


def test_an_in_memory_hunt_needs_the_hunt_object(tmp_path: Path) -> None:
    hunt = make_hunt("memory", tmp_path)
    with pytest.raises(TypeError, match="TreasureHunt"):
        tool_ls(hunt.root, hunt.root)
    assert tool_ls(hunt.root, hunt.backend) == tool_ls(hunt.root, hunt)


# --- path helpers -----------------------------------------------------------------------


def test_is_path_safe_follows_the_seed_examples(tmp_path: Path) -> None:
    assert is_path_safe(Path("/hunt"), Path("/hunt/subdir")) is True
    assert is_path_safe(Path("/hunt"), Path("/hunt")) is True
    assert is_path_safe(Path("/hunt"), Path("/etc/passwd")) is False
    assert is_path_safe(Path("/hunt"), Path("/hunt/../etc")) is False
    assert is_path_safe(Path("/hunt"), Path("/hunter")) is False
    assert is_path_safe(Path("/hunt"), "subdir/file.txt") is True
    assert is_path_safe(Path("/hunt"), "../../etc") is False
    assert is_path_safe(Path("/hunt"), "/hunt/a\x00b") is False
    (tmp_path / "hunt").mkdir()
    (tmp_path / "hunt" / "out").symlink_to(tmp_path)
    assert is_path_safe(tmp_path / "hunt", tmp_path / "hunt" / "out") is False
    assert is_path_safe(tmp_path / "hunt", tmp_path / "hunt" / "out" / "hunt") is True


def test_resolve_path_follows_the_seed_example(hunt: TreasureHunt) -> None:
    root = root_argument(hunt)
    first, second = hunt.config["golden_path"][:2]
    assert resolve_path(location(hunt, second), root, "../other/file.txt") == location(hunt, f"{first}/other/file.txt")
    assert resolve_path(location(hunt, first), root, "/x/y") == location(hunt, "x/y")
    assert resolve_path(location(hunt, first), root, ".") == location(hunt, first)
    assert resolve_path(location(hunt, first), root, "../..") is None
    assert resolve_path(location(hunt, first), root, "a\x00b") is None
    assert resolve_path(location(hunt, first), root, "a" * 5000) is None


# --- both backends agree ----------------------------------------------------------------


def relative_result(hunt: TreasureHunt, result: Any) -> Any:
    """A result with the new directory of ``cd`` made relative to the hunt root."""
    if isinstance(result, tuple):
        outcome, new_dir = result
        return outcome, Path(new_dir).relative_to(hunt.root).as_posix()
    return result


def path_strategy(hunt: TreasureHunt) -> st.SearchStrategy[str]:
    paths = sorted([*hunt.layout.files, *hunt.layout.directories])
    names = sorted({part for path in paths for part in path.split("/") if part})
    segment = st.sampled_from([*names, ".", "..", "", "ghost", CONFIG_FILE, "treasure.txt"])
    return st.one_of(
        st.sampled_from(paths).map(lambda path: f"/{path}"),
        st.lists(segment, min_size=1, max_size=5).map("/".join),
        st.lists(segment, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts)),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_both_backends_give_identical_results(data: st.DataObject, tmp_path_factory: pytest.TempPathFactory) -> None:
    base = tmp_path_factory.mktemp("same")
    hunts = [make_hunt("memory", base), make_hunt("disk", base)]
    paths = path_strategy(hunts[0])
    tool_call = st.one_of(
        st.builds(lambda p: {"tool": "cd", "path": p}, paths),
        st.builds(lambda p: {"tool": "ls", "path": p}, paths),
        st.builds(lambda p: {"tool": "cat", "file": p}, paths),
        st.just({"tool": "pwd"}),
        st.just({"tool": "ls"}),
        st.builds(
            lambda k: {"tool": "check_treasure", "key": k}, st.sampled_from(["nope", hunts[0].config["treasure_key"]])
        ),
    )
    calls = data.draw(st.lists(tool_call, min_size=1, max_size=25))
    here = [hunt.root for hunt in hunts]
    for call in calls:
        results = []
        for index, hunt in enumerate(hunts):
            result = execute_tool(call, here[index], hunt if hunt.in_memory else hunt.root, hunt.config)
            if isinstance(result, tuple):
                here[index] = result[1]
            results.append(relative_result(hunt, result))
        assert results[0] == results[1], call


# --- the tools never write --------------------------------------------------------------


def snapshot(root: Path) -> dict[str, tuple[int, int, bytes]]:
    state = {}
    for current, dir_names, file_names in os.walk(root):
        for name in dir_names + file_names:
            path = Path(current) / name
            info = path.lstat()
            content = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
            state[str(path.relative_to(root))] = (info.st_mode, info.st_mtime_ns, content)
    return state


# --- the attack corpus ------------------------------------------------------------------

CANARY = "CANARY-7f3a9c"

HOSTILE_PATHS = [
    # parent-directory chains
    "..",
    "../",
    "../..",
    "../../..",
    "../" * 60,
    "/..",
    "/../",
    "/../../etc/passwd",
    "../secret/passwords.txt",
    "./../secret",
    "a/../../secret",
    "start.txt/../../secret",
    "./././../secret",
    "/./../secret/passwords.txt",
    "//../secret",
    # absolute paths of the machine, which are names under the hunt root
    "/etc/passwd",
    "/etc",
    "/proc/self/environ",
    "/proc/self/cwd",
    "/root/.ssh/id_rsa",
    "/dev/zero",
    "/dev/urandom",
    "~",
    "~/.bashrc",
    "$HOME",
    "${PWD}/" + "../" * 12,
    # encodings and other separators
    "%2e%2e/%2e%2e/etc/passwd",
    "..%2f..%2fetc",
    "..\\..\\secret",
    "\\secret",
    "C:\\Windows\\win.ini",
    "..;/secret",
    "....//....//secret",
    # control characters, NUL bytes
    "\x00",
    "start.txt\x00",
    "..\x00/secret",
    "sec\x00ret",
    "..\n/secret",
    "\t..",
    "..\r\n",
    "\x1b[2J",
    # odd unicode
    "\uff0e\uff0e/\uff0e\uff0e/secret",
    "\u2025/secret",
    "..\u2215..\u2215secret",
    "\u202e../../secret",
    "start\u200b.txt",
    "\uff53\uff54\uff41\uff52\uff54.txt",
    "\U0001f480",
    "\udcff",
    # huge paths
    "a" * 5000,
    "/" * 5000,
    "../" * 2000 + "secret",
    "./" * 3000 + "start.txt",
    # hidden files and the config
    CONFIG_FILE,
    f"./{CONFIG_FILE}",
    f"/{CONFIG_FILE}",
    f"ghost/../{CONFIG_FILE}",
    ".git",
    ".git/secret.txt",
    "...",
    ".hidden_dir/deep.txt",
    # symlinks planted on disk (plain missing names in memory)
    "escape_dir",
    "escape_dir/passwords.txt",
    "escape_abs",
    "escape_abs/passwd",
    "escape_file.txt",
    "loop_a",
    "loop_a/x",
    "self_loop",
    "config_link.txt",
    "hidden_link",
    "hidden_link/secret.txt",
    "dangling",
    "fifo",
    "fifo_link",
    "/escape_dir/../escape_dir/passwords.txt",
    "escape_dir/../../secret",
]

HOSTILE_PATHS_FROM_DEPTH_2 = [
    "../../..",
    "../../../secret",
    "../../../secret/passwords.txt",
    "/../..",
    f"../../{CONFIG_FILE}",
    f"../../../hunt/{CONFIG_FILE}",
    "../../escape_dir/passwords.txt",
    "escape",
    "escape/passwords.txt",
    "../" * 3 + "\x00",
    "./escape/../escape/passwords.txt",
]


def plant_attacks(hunt: TreasureHunt, secret: Path) -> None:
    """Symlinks out of the hunt, loops, links to hidden files, a FIFO, hidden directories."""
    root = Path(hunt.root)
    (root / "escape_dir").symlink_to(os.path.relpath(secret, root))
    (root / "escape_abs").symlink_to("/etc")
    (root / "escape_file.txt").symlink_to(secret / "passwords.txt")
    (root / "loop_a").symlink_to("loop_b")
    (root / "loop_b").symlink_to("loop_a")
    (root / "self_loop").symlink_to("self_loop")
    (root / "config_link.txt").symlink_to(CONFIG_FILE)
    (root / ".git").mkdir()
    (root / ".git" / "secret.txt").write_text(CANARY)
    (root / "hidden_link").symlink_to(".git")
    (root / "dangling").symlink_to("does_not_exist")
    os.mkfifo(root / "fifo")
    (root / "fifo_link").symlink_to("fifo")
    deep = root / hunt.config["golden_path"][1]
    (deep / "escape").symlink_to(os.path.relpath(secret, deep))


@pytest.fixture
def attacked(tmp_path: Path) -> tuple[TreasureHunt, TreasureHunt, Path]:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "passwords.txt").write_text(CANARY)
    disk = make_hunt("disk", tmp_path)
    plant_attacks(disk, secret)
    return make_hunt("memory", tmp_path), disk, secret


def test_the_corpus_is_large() -> None:
    assert len(set(HOSTILE_PATHS)) == len(HOSTILE_PATHS) >= 50


def test_planted_entries_are_not_listed(attacked: tuple[TreasureHunt, TreasureHunt, Path]) -> None:
    memory, disk, _ = attacked
    assert (
        tool_ls(disk.root, disk.root)
        == tool_ls(memory.root, memory)
        == {"success": True, "output": listing(memory, "")}
    )
    golden = disk.config["golden_path"][1]
    assert tool_ls(disk.root / golden, disk.root) == {"success": True, "output": listing(memory, golden)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_hostile_path_is_refused_and_nothing_is_read(
    backend: str, attacked: tuple[TreasureHunt, TreasureHunt, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    memory, disk, secret = attacked
    hunt = memory if backend == "memory" else disk
    root = root_argument(hunt)
    key = hunt.config["treasure_key"]
    before = snapshot(Path(disk.root))
    opened: list[str] = []
    real_open, real_scandir = os.open, os.scandir

    def where(path: Any, dir_fd: int | None = None) -> str:
        """The path of what is opened: a name under a directory descriptor is located through /proc."""
        if isinstance(path, int):
            return os.readlink(f"/proc/self/fd/{path}")
        if dir_fd is None:
            return os.path.realpath(path)
        return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), os.fspath(path))

    def recording_open(path: Any, flags: int, *args: Any, dir_fd: int | None = None, **kwargs: Any) -> int:
        opened.append(where(path, dir_fd))
        assert flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND) == 0
        if dir_fd is not None:
            assert flags & os.O_NOFOLLOW, "a name under the hunt is opened without following symlinks"
        return real_open(path, flags, *args, dir_fd=dir_fd, **kwargs)

    def recording_scandir(path: Any = ".") -> Any:
        opened.append(where(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "open", recording_open)
    monkeypatch.setattr(os, "scandir", recording_scandir)
    deep = location(hunt, hunt.config["golden_path"][1])
    for start, paths in ((hunt.root, HOSTILE_PATHS), (deep, HOSTILE_PATHS_FROM_DEPTH_2)):
        for path in paths:
            allowed = {BOUNDARY_ERROR, f"Directory not found: {path}"}
            result, new_dir = tool_cd(start, root, path)
            assert new_dir == start and not result["success"] and result["error"] in allowed, (path, result)
            result = tool_ls(start, root, path)
            assert not result["success"] and result["error"] in allowed, (path, result)
            result = tool_cat(start, root, path)
            assert not result["success"] and result["error"] in {BOUNDARY_ERROR, f"File not found: {path}"}, (
                path,
                result,
            )
            for call in ({"tool": "cat", "file": path}, json.dumps({"tool": "ls", "path": path})):
                result = execute_tool(call, start, root, hunt.config)
                assert not result["success"] and CANARY not in json.dumps(result) and key not in json.dumps(result)
            result = tool_check_treasure(start, root, hunt.config, path)
            assert not result["success"]
    monkeypatch.undo()

    real_root = os.path.realpath(disk.root)
    assert opened or backend == "memory"
    for real in opened:
        path = real
        assert real == real_root or real.startswith(real_root + os.sep), f"opened outside the hunt: {path}"
        assert "/." not in real[len(real_root) :], f"opened a hidden path: {path}"
    assert CANARY in (secret / "passwords.txt").read_text()
    assert snapshot(Path(disk.root)) == before


def test_symlinks_out_of_the_hunt_get_the_boundary_error(attacked: tuple[TreasureHunt, TreasureHunt, Path]) -> None:
    _, disk, _ = attacked
    assert tool_cd(disk.root, disk.root, "escape_dir") == (failed(BOUNDARY_ERROR), disk.root)
    assert tool_cat(disk.root, disk.root, "escape_file.txt") == failed(BOUNDARY_ERROR)
    assert tool_ls(disk.root, disk.root, "escape_abs") == failed(BOUNDARY_ERROR)
    assert tool_cat(disk.root, disk.root, "config_link.txt") == {
        "success": False,
        "output": "",
        "error": "File not found: config_link.txt",
    }
    assert tool_cat(disk.root, disk.root, "fifo") == failed("File not found: fifo")
    assert tool_cd(disk.root, disk.root, "loop_a")[0] == failed("Directory not found: loop_a")
    assert resolve_path(disk.root, disk.root, "escape_dir/passwords.txt") is None


def test_symlinks_inside_the_hunt_work(tmp_path: Path) -> None:
    hunt = make_hunt("disk", tmp_path)
    first = hunt.config["golden_path"][0]
    (hunt.root / "shortcut").symlink_to(first)
    assert tool_ls(hunt.root, hunt.root, "shortcut") == {"success": True, "output": listing(hunt, first)}
    assert "shortcut/" in tool_ls(hunt.root, hunt.root)["output"].split("\n")


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_tools_never_write(backend: str, tmp_path: Path) -> None:
    hunt = make_hunt(backend, tmp_path)
    layout_before = json.dumps([hunt.layout.directories, hunt.layout.files, hunt.config], sort_keys=True)
    disk_before = snapshot(tmp_path)
    here = hunt.root
    root = root_argument(hunt)
    for clue in hunt.config["clue_chain"]:
        for call in (
            {"tool": "ls"},
            {"tool": "cat", "file": f"/{clue}"},
            {"tool": "pwd"},
            {"tool": "check_treasure", "key": "x"},
        ):
            execute_tool(call, here, root, hunt.config)
        _, here = execute_tool({"tool": "cd", "path": f"/{posixpath.dirname(clue)}"}, here, root, hunt.config)
    execute_tool({"tool": "check_treasure", "key": hunt.config["treasure_key"]}, here, root, hunt.config)
    assert json.dumps([hunt.layout.directories, hunt.layout.files, hunt.config], sort_keys=True) == layout_before
    assert snapshot(tmp_path) == disk_before


def test_disk_backend_reports_outside_for_escaping_symlinks(attacked: tuple[TreasureHunt, TreasureHunt, Path]) -> None:
    _, disk, _ = attacked
    backend = DiskBackend(disk.root)
    assert backend.kind("escape_dir") == "outside"
    assert backend.kind("config_link.txt") is None
    assert backend.kind("") == "directory"
    assert backend.kind("start.txt") == "file"


# --- tool schemas -----------------------------------------------------------------------


def test_schemas_and_checks_come_from_one_declaration() -> None:
    assert TREASURE_HUNT_TOOL_SCHEMAS == HUNT_TOOLS.schemas()
    assert HUNT_TOOLS.names == ("pwd", "cd", "ls", "cat", "check_treasure", "give_up")
    assert HUNT_TOOLS.validate("ls", {}) == {"path": None}
    with pytest.raises(ToolCallError, match="missing required parameter 'key'"):
        HUNT_TOOLS.validate("check_treasure", {})


def test_tool_schemas_describe_every_tool() -> None:
    names = [schema["function"]["name"] for schema in TREASURE_HUNT_TOOL_SCHEMAS]
    assert names == ["pwd", "cd", "ls", "cat", "check_treasure", "give_up"]
    for schema in TREASURE_HUNT_TOOL_SCHEMAS:
        assert schema["type"] == "function"
        jsonschema.Draft7Validator.check_schema(schema["function"]["parameters"])
    parameters = {schema["function"]["name"]: schema["function"]["parameters"] for schema in TREASURE_HUNT_TOOL_SCHEMAS}
    jsonschema.validate({"path": "./amber"}, parameters["cd"])
    jsonschema.validate({}, parameters["ls"])
    jsonschema.validate({"file": "start.txt"}, parameters["cat"])
    jsonschema.validate({"key": "abc"}, parameters["check_treasure"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({}, parameters["cat"])


def test_schema_shaped_calls_run(hunt: TreasureHunt) -> None:
    root = root_argument(hunt)
    for schema in TREASURE_HUNT_TOOL_SCHEMAS:
        function = schema["function"]
        arguments = {name: "start.txt" if name == "file" else "." for name in function["parameters"]["required"]}
        call = {"type": "function", "function": {"name": function["name"], "arguments": json.dumps(arguments)}}
        result = execute_tool(call, hunt.root, root, hunt.config)
        outcome = result[0] if isinstance(result, tuple) else result
        assert outcome["success"] or outcome["error"] == NO_TREASURE_ERROR, (function["name"], outcome)
