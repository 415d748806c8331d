"""The seed's ``game_tools.md`` code blocks, run as written (only imports adapted).

The blocks below are copied verbatim from the seed. The API blocks are run twice: as
written (they define stub functions whose signatures must match ours) and through their
``>>>`` examples, evaluated against our functions with the seed's ``/hunt`` laid out in a
temporary directory (the adapted import: ``Path`` maps ``/hunt`` there); ``is_path_safe``
and ``resolve_path`` also run on the literal ``/hunt``, which exists nowhere. The usage
blocks run as written, and what they print is checked against their comments.
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import inspect
import io
import json
import pathlib
import re
import textwrap
from typing import Any, Optional, Tuple  # noqa: UP035 - the seed's own annotations

import pytest

from arena_envs.treasure_hunt import (
    HuntLayout,
    execute_tool,
    is_path_safe,
    resolve_path,
    tool_cat,
    tool_cd,
    tool_check_treasure,
    tool_ls,
    tool_pwd,
)

# fmt: off
EXECUTE_TOOL = r'''
def execute_tool(
    tool_call: dict,
    current_dir: Path,
    hunt_root: Path,
    config: dict
) -> dict:
    """
    Execute an agent's tool call.

    Args:
        tool_call: Tool specification with name and parameters
        current_dir: Agent's current working directory
        hunt_root: Root of the treasure hunt
        config: Hunt configuration

    Returns:
        dict: Result with 'success', 'output', and optional 'error'

    Example:
        >>> execute_tool(
        ...     {"tool": "ls"},
        ...     Path("/hunt/dir"),
        ...     Path("/hunt"),
        ...     config
        ... )
        {'success': True, 'output': 'file1.txt\nsubdir/'}
    """
'''

TOOL_PWD = r'''
def tool_pwd(current_dir: Path, hunt_root: Path) -> dict:
    """
    Return current working directory relative to hunt root.

    Args:
        current_dir: Current directory
        hunt_root: Hunt root directory

    Returns:
        dict: {'success': True, 'output': relative_path}

    Example:
        >>> tool_pwd(Path("/hunt/dir/subdir"), Path("/hunt"))
        {'success': True, 'output': '/dir/subdir'}
    """
'''

TOOL_CD = r'''
def tool_cd(
    current_dir: Path,
    hunt_root: Path,
    path: str
) -> Tuple[dict, Path]:
    """
    Change directory to specified path.

    Args:
        current_dir: Current directory
        hunt_root: Hunt root directory
        path: Target path (relative or absolute)

    Returns:
        Tuple of (result_dict, new_directory)
        result_dict: {'success': bool, 'output': str, 'error': Optional[str]}

    Example:
        >>> tool_cd(
        ...     Path("/hunt"),
        ...     Path("/hunt"),
        ...     "./subdir"
        ... )
        ({'success': True, 'output': 'Changed to /subdir'}, Path("/hunt/subdir"))
    """
'''

TOOL_LS = r'''
def tool_ls(
    current_dir: Path,
    hunt_root: Path,
    path: Optional[str] = None
) -> dict:
    """
    List contents of current or specified directory.

    Args:
        current_dir: Current directory
        hunt_root: Hunt root directory
        path: Optional path to list (default: current directory)

    Returns:
        dict: {'success': bool, 'output': str, 'error': Optional[str]}
        Output format: one item per line, directories end with '/'

    Example:
        >>> tool_ls(Path("/hunt/dir"), Path("/hunt"))
        {
            'success': True,
            'output': 'clue.txt\nsubdir1/\nsubdir2/'
        }
    """
'''

TOOL_CAT = r'''
def tool_cat(
    current_dir: Path,
    hunt_root: Path,
    file: str
) -> dict:
    """
    Read and return file contents.

    Args:
        current_dir: Current directory
        hunt_root: Hunt root directory
        file: File path (relative or absolute)

    Returns:
        dict: {'success': bool, 'output': str, 'error': Optional[str]}

    Example:
        >>> tool_cat(Path("/hunt"), Path("/hunt"), "clue.txt")
        {
            'success': True,
            'output': 'Next clue: ./subdir/next.txt'
        }
    """
'''

TOOL_CHECK_TREASURE = r'''
def tool_check_treasure(
    current_dir: Path,
    hunt_root: Path,
    config: dict,
    key: str
) -> dict:
    """
    Check if agent has found the treasure.

    Args:
        current_dir: Current directory
        hunt_root: Hunt root directory
        config: Hunt configuration
        key: Treasure key provided by agent

    Returns:
        dict: {'success': bool, 'output': str, 'error': Optional[str]}
        success=True only if:
        - Agent is in correct directory
        - Treasure file exists
        - Key matches treasure_key from config

    Example:
        >>> tool_check_treasure(
        ...     Path("/hunt/final"),
        ...     Path("/hunt"),
        ...     config,
        ...     "correct_key_123"
        ... )
        {
            'success': True,
            'output': 'TREASURE FOUND! You win!'
        }
    """
'''

IS_PATH_SAFE = r'''
def is_path_safe(
    base_path: Path,
    target_path: Path
) -> bool:
    """
    Check if target path is within base path.

    Args:
        base_path: Root directory boundary
        target_path: Path to validate

    Returns:
        bool: True if path is safe, False otherwise

    Example:
        >>> is_path_safe(Path("/hunt"), Path("/hunt/subdir"))
        True
        >>> is_path_safe(Path("/hunt"), Path("/etc/passwd"))
        False
    """
'''

RESOLVE_PATH = r'''
def resolve_path(
    current_dir: Path,
    hunt_root: Path,
    path: str
) -> Optional[Path]:
    """
    Resolve and validate a path.

    Args:
        current_dir: Current working directory
        hunt_root: Hunt root directory
        path: Path string to resolve

    Returns:
        Resolved Path object if valid, None if invalid

    Example:
        >>> resolve_path(
        ...     Path("/hunt/dir"),
        ...     Path("/hunt"),
        ...     "../other/file.txt"
        ... )
        Path("/hunt/other/file.txt")
    """
'''

ERRORS = r'''
# Path outside hunt boundaries
{
    'success': False,
    'error': 'Path outside treasure hunt boundaries'
}

# File not found
{
    'success': False,
    'error': 'File not found: clue.txt'
}

# Directory not found
{
    'success': False,
    'error': 'Directory not found: ./subdir'
}

# Incorrect treasure key
{
    'success': False,
    'error': 'Incorrect treasure key'
}

# Invalid tool
{
    'success': False,
    'error': 'Unknown tool: invalid_tool'
}
'''

BASIC_NAVIGATION = r'''
# Start at hunt root
result = execute_tool(
    {"tool": "pwd"},
    hunt_root,
    hunt_root,
    config
)
print(result['output'])  # "/"

# List files
result = execute_tool(
    {"tool": "ls"},
    hunt_root,
    hunt_root,
    config
)
print(result['output'])  # "start.txt\ndir1/\ndir2/"

# Read start file
result = execute_tool(
    {"tool": "cat", "file": "start.txt"},
    hunt_root,
    hunt_root,
    config
)
print(result['output'])  # "Next clue: ./dir1/clue.txt"
'''

COMPLETE_NAVIGATION = r'''
# Change to directory
result, new_dir = execute_tool(
    {"tool": "cd", "path": "./dir1"},
    hunt_root,
    hunt_root,
    config
)

# Read clue in new directory
result = execute_tool(
    {"tool": "cat", "file": "clue.txt"},
    new_dir,
    hunt_root,
    config
)

# Continue following clues...

# Finally check treasure
result = execute_tool(
    {"tool": "check_treasure", "key": "treasure_key_123"},
    final_dir,
    hunt_root,
    config
)
'''

TOOL_CALL_FORMATS = [
    r'''{
    "tool": "pwd"
}
''',
    r'''{
    "tool": "cd",
    "path": "./subdirectory"
}
''',
    r'''{
    "tool": "ls"
}
''',
    r'''{
    "tool": "ls",
    "path": "./subdirectory"
}
''',
    r'''{
    "tool": "cat",
    "file": "clue.txt"
}
''',
    r'''{
    "tool": "check_treasure",
    "key": "treasure_key_from_file"
}
''',
    r'''{
    "tool": "tool_name",
    "param1": "value1",
    "param2": "value2"
}
''',
]
# fmt: on

OURS = {
    "execute_tool": execute_tool,
    "tool_pwd": tool_pwd,
    "tool_cd": tool_cd,
    "tool_ls": tool_ls,
    "tool_cat": tool_cat,
    "tool_check_treasure": tool_check_treasure,
    "is_path_safe": is_path_safe,
    "resolve_path": resolve_path,
}
API_BLOCKS = {
    "execute_tool": EXECUTE_TOOL,
    "tool_pwd": TOOL_PWD,
    "tool_cd": TOOL_CD,
    "tool_ls": TOOL_LS,
    "tool_cat": TOOL_CAT,
    "tool_check_treasure": TOOL_CHECK_TREASURE,
    "is_path_safe": IS_PATH_SAFE,
    "resolve_path": RESOLVE_PATH,
}
# The hunt each example implies: its files (with text) and its empty directories.
EXAMPLE_HUNTS: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "execute_tool": ({"dir/file1.txt": "a file"}, ("dir/subdir",)),
    "tool_pwd": ({}, ("dir/subdir",)),
    "tool_cd": ({}, ("subdir",)),
    "tool_ls": ({"dir/clue.txt": "a clue"}, ("dir/subdir1", "dir/subdir2")),
    "tool_cat": ({"clue.txt": "Next clue: ./subdir/next.txt", "subdir/next.txt": "the end"}, ()),
    "tool_check_treasure": ({"final/treasure.txt": "Treasure key: correct_key_123"}, ()),
    "is_path_safe": ({}, ("subdir",)),
    "resolve_path": ({}, ("dir", "other")),
}
SEED_CONFIG = {"treasure_key": "correct_key_123"}  # all that tool_check_treasure's example names


def seed_path_under(base: pathlib.Path) -> Any:
    """``Path`` for the examples: the seed's ``/hunt`` is ``base / "hunt"``, every other path is itself."""

    def path(text: str) -> pathlib.Path:
        if text == "/hunt" or text.startswith("/hunt/"):
            return base / text.lstrip("/")
        return pathlib.Path(text)

    return path


def run_examples(block: str, namespace: dict[str, Any]) -> int:
    """Evaluate every ``>>>`` example of ``block`` and compare it with the value it shows."""
    docstring_example = textwrap.dedent(block.split("Example:", 1)[1].rsplit('"""', 1)[0])
    examples = doctest.DocTestParser().get_examples(docstring_example)
    for example in examples:
        got = eval(example.source, namespace)
        assert got == eval(example.want, namespace), (example.source, got)
    return len(examples)


@pytest.mark.parametrize("name", list(API_BLOCKS))
def test_the_api_blocks_run_as_written_with_our_signatures(name: str) -> None:
    scratch: dict[str, Any] = {"Path": pathlib.Path, "Optional": Optional, "Tuple": Tuple}  # noqa: UP006
    exec(API_BLOCKS[name], scratch)
    assert list(inspect.signature(scratch[name]).parameters) == list(inspect.signature(OURS[name]).parameters)


@pytest.mark.parametrize("name", list(API_BLOCKS))
def test_the_api_examples_hold(name: str, tmp_path: pathlib.Path) -> None:
    files, directories = EXAMPLE_HUNTS[name]
    (tmp_path / "hunt").mkdir()
    HuntLayout.from_files(files, directories).write(tmp_path / "hunt")
    namespace = {**OURS, "Path": seed_path_under(tmp_path), "config": dict(SEED_CONFIG)}
    assert run_examples(API_BLOCKS[name], namespace) >= 1


@pytest.mark.parametrize("name", ["is_path_safe", "resolve_path"])
def test_the_path_examples_hold_on_a_hunt_that_exists_nowhere(name: str) -> None:
    assert not pathlib.Path("/hunt").exists()
    assert run_examples(API_BLOCKS[name], {**OURS, "Path": pathlib.Path}) >= 1


def test_the_error_messages_are_the_seeds(tmp_path: pathlib.Path) -> None:
    """The seed's error dicts, block run as written; ours add the empty ``output`` the seed's cd lists."""
    exec(ERRORS, {})
    seed_errors = [ast.literal_eval(node.value) for node in ast.parse(ERRORS).body if isinstance(node, ast.Expr)]
    HuntLayout.from_files({"final/treasure.txt": "Treasure key: correct_key_123"}).write(tmp_path)
    ours = [
        tool_cat(tmp_path, tmp_path, "../outside.txt"),
        tool_cat(tmp_path, tmp_path, "clue.txt"),
        tool_cd(tmp_path, tmp_path, "./subdir")[0],
        tool_check_treasure(tmp_path / "final", tmp_path, SEED_CONFIG, "wrong_key"),
        execute_tool({"tool": "invalid_tool"}, tmp_path, tmp_path, SEED_CONFIG),
    ]
    assert len(seed_errors) == len(ours) == 5
    for seed_error, our_error in zip(seed_errors, ours, strict=True):
        assert our_error == {**seed_error, "output": ""}


def test_every_tool_call_format_runs(tmp_path: pathlib.Path) -> None:
    HuntLayout.from_files(
        {"clue.txt": "Next clue: ./subdirectory/treasure.txt", "treasure.txt": "key: treasure_key_from_file"},
        directories=("subdirectory",),
    ).write(tmp_path)
    config = {"treasure_key": "treasure_key_from_file"}
    *tool_calls, standard_format = TOOL_CALL_FORMATS
    for text in tool_calls:
        for call in (text, json.loads(text)):
            result = execute_tool(call, tmp_path, tmp_path, config)
            outcome = result[0] if isinstance(result, tuple) else result
            assert outcome["success"], (text, outcome)
    assert execute_tool(standard_format, tmp_path, tmp_path, config) == {
        "success": False,
        "output": "",
        "error": "Unknown tool: tool_name",
    }


def printed_comments(block: str) -> str:
    """What the block's ``print(...)  # "..."`` comments say it prints."""
    said = re.findall(r'print\(.*\)\s*# "(.*)"', block)
    return "".join(text.replace("\\n", "\n") + "\n" for text in said)


@pytest.fixture
def usage_hunt(tmp_path: pathlib.Path) -> dict[str, Any]:
    """The hunt the usage examples walk: start.txt, dir1/clue.txt, the treasure in dir2."""
    HuntLayout.from_files(
        {
            "start.txt": "Next clue: ./dir1/clue.txt",
            "dir1/clue.txt": "Next clue: ../dir2/treasure.txt",
            "dir2/treasure.txt": "Treasure key: treasure_key_123",
        }
    ).write(tmp_path)
    return {
        "execute_tool": execute_tool,
        "hunt_root": tmp_path,
        "config": {"treasure_key": "treasure_key_123"},
        "final_dir": tmp_path / "dir2",
    }


def test_basic_navigation_runs_as_written(usage_hunt: dict[str, Any]) -> None:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(BASIC_NAVIGATION, usage_hunt)
    assert (
        printed.getvalue()
        == printed_comments(BASIC_NAVIGATION)
        == "/\nstart.txt\ndir1/\ndir2/\nNext clue: ./dir1/clue.txt\n"
    )


def test_complete_navigation_runs_as_written(usage_hunt: dict[str, Any]) -> None:
    exec(COMPLETE_NAVIGATION, usage_hunt)
    assert usage_hunt["new_dir"] == usage_hunt["hunt_root"] / "dir1"
    assert usage_hunt["result"] == {"success": True, "output": "TREASURE FOUND! You win!"}
