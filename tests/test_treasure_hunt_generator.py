"""The treasure-hunt generator: clue chains, red herrings, bounds, determinism, validation."""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arena_envs.treasure_hunt import (
    CONFIG_FILE,
    PRESETS,
    HuntLayout,
    TreasureHunt,
    generate_treasure_hunt,
)
from arena_envs.treasure_hunt.generator import KEY_LENGTH, START_FILE, TREASURE_FILE

KEY_PATTERN = re.compile(r"Treasure key: (\S+)")
LINK_PATTERN = re.compile(r"(?<!\S)(\.{1,2}/\S+)")


def follow_clues(layout: HuntLayout, limit: int = 100) -> tuple[list[str], str]:
    """Read the texts from start.txt on, as a player would; return the files read and the key found."""
    path = START_FILE
    read = [path]
    while len(read) <= limit:
        text = layout.files[path]
        key = KEY_PATTERN.search(text)
        if key:
            return read, key.group(1)
        link = LINK_PATTERN.search(text)
        assert link, f"clue {path!r} names no path: {text!r}"
        path = posixpath.normpath(posixpath.join(posixpath.dirname(path), link.group(1)))
        assert path in layout.files, f"clue chain broken at {path!r}"
        read.append(path)
    raise AssertionError("the clue chain does not end")


def depth_of(path: str) -> int:
    return path.count("/") + 1 if path else 0


def digest(hunt: TreasureHunt) -> str:
    directories = {path: [sorted(files), sorted(dirs)] for path, (files, dirs) in hunt.layout.directories.items()}
    content = {"config": hunt.config, "directories": directories, "files": hunt.layout.files}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def test_presets_match_the_design() -> None:
    assert PRESETS["easy"] == (4, 2, 0.2)
    assert PRESETS["medium"] == (6, 3, 0.3)
    assert PRESETS["hard"] == (8, 4, 0.4)


@pytest.mark.parametrize("difficulty", sorted(PRESETS))
def test_preset_parameters_reach_the_config(difficulty: str) -> None:
    config = generate_treasure_hunt(seed=1, difficulty=difficulty).config
    assert (config["depth"], config["branching_factor"], config["file_density"]) == PRESETS[difficulty]
    assert config["difficulty"] == difficulty
    assert config["seed"] == 1


@pytest.mark.parametrize("difficulty", sorted(PRESETS))
def test_clue_chain_leads_down_the_golden_path_to_the_key(difficulty: str) -> None:
    depth = PRESETS[difficulty].depth
    for seed in range(40):
        hunt = generate_treasure_hunt(seed=seed, difficulty=difficulty)
        read, key = follow_clues(hunt.layout)
        assert read == hunt.config["clue_chain"]
        assert key == hunt.config["treasure_key"]
        assert len(read) == depth + 1
        assert [posixpath.dirname(path) for path in read] == ["", *hunt.config["golden_path"]]
        assert [depth_of(posixpath.dirname(path)) for path in read] == list(range(depth + 1))
        assert read[-1] == hunt.config["treasure_path"]
        assert posixpath.basename(read[-1]) == TREASURE_FILE
        assert hunt.config["optimal_path_length"] == depth + 3


@pytest.mark.parametrize("difficulty", sorted(PRESETS))
def test_no_directory_is_deeper_than_the_treasure(difficulty: str) -> None:
    depth = PRESETS[difficulty].depth
    for seed in range(40):
        layout = generate_treasure_hunt(seed=seed, difficulty=difficulty).layout
        assert max(depth_of(path) for path in layout.directories) == depth
        assert max(depth_of(posixpath.dirname(path)) for path in layout.files) <= depth


@pytest.mark.parametrize("difficulty", sorted(PRESETS))
def test_red_herrings_are_present_and_misleading(difficulty: str) -> None:
    params = PRESETS[difficulty]
    kinds_seen = set()
    for seed in range(40):
        hunt = generate_treasure_hunt(seed=seed, difficulty=difficulty)
        config, layout = hunt.config, hunt.layout
        golden = set(config["golden_path"])
        herrings = config["red_herrings"]
        assert len(herrings) >= (params.branching_factor - 1) * params.depth
        assert not golden & set(herrings)
        assert set(herrings) | golden | {""} == set(layout.directories)
        for herring in herrings:
            assert layout.directories[herring][0], f"red herring {herring!r} holds no file"
        for path, text in layout.files.items():
            if path in config["clue_chain"]:
                continue
            key = KEY_PATTERN.search(text)
            link = LINK_PATTERN.search(text)
            if key:
                assert key.group(1) != config["treasure_key"]
                kinds_seen.add("fake treasure")
            elif link:
                target = posixpath.normpath(posixpath.join(posixpath.dirname(path), link.group(1)))
                assert target not in config["clue_chain"]
                if target in layout.files:
                    assert posixpath.dirname(target) in herrings
                    kinds_seen.add("path to another red herring")
                else:
                    kinds_seen.add("path to nowhere")
            else:
                kinds_seen.add("dead end")
    assert kinds_seen == {"fake treasure", "path to another red herring", "path to nowhere", "dead end"}


def test_layout_lists_every_file_in_its_directory_once() -> None:
    for seed in range(20):
        layout = generate_treasure_hunt(seed=seed, difficulty="hard").layout
        listed = set()
        for directory, (files, dirs) in layout.directories.items():
            assert len(set(files) | set(dirs)) == len(files) + len(dirs), "duplicate names"
            assert not {name.removesuffix(".txt") for name in files} & set(dirs)
            listed |= {posixpath.join(directory, name) for name in files}
            for name in dirs:
                assert posixpath.join(directory, name) in layout.directories
        assert listed == set(layout.files)


def test_file_density_controls_the_decoy_files() -> None:
    sparse = generate_treasure_hunt(seed=5, difficulty="medium", file_density=0.0)
    dense = generate_treasure_hunt(seed=5, difficulty="medium", file_density=1.0)
    depth = sparse.config["depth"]
    # Without decoys: the chain plus one misleading file per red herring.
    assert len(sparse.layout.files) == depth + 1 + len(sparse.config["red_herrings"])
    # With density 1, every directory gets all three decoy files.
    assert len(dense.layout.files) == len(sparse.layout.files) + 3 * len(sparse.layout.directories)


def test_overrides_replace_the_preset() -> None:
    config = generate_treasure_hunt(seed=2, difficulty="hard", depth=2, branching_factor=1, file_density=0.5).config
    assert (config["depth"], config["branching_factor"], config["file_density"]) == (2, 1, 0.5)
    assert config["red_herrings"] == []
    assert len(config["clue_chain"]) == 3


def test_treasure_key_is_sixteen_characters() -> None:
    keys = {generate_treasure_hunt(seed=seed).config["treasure_key"] for seed in range(50)}
    assert len(keys) == 50
    assert all(len(key) == KEY_LENGTH == 16 and key.isalnum() for key in keys)


def test_same_seed_same_hunt_and_different_seeds_differ() -> None:
    for difficulty in PRESETS:
        assert digest(generate_treasure_hunt(seed=9, difficulty=difficulty)) == digest(
            generate_treasure_hunt(seed=9, difficulty=difficulty)
        )
    assert len({digest(generate_treasure_hunt(seed=seed)) for seed in range(30)}) == 30


def test_numpy_integer_seeds_are_plain_seeds() -> None:
    hunt = generate_treasure_hunt(seed=np.int64(31))
    assert digest(hunt) == digest(generate_treasure_hunt(seed=31))
    assert type(hunt.config["seed"]) is int


def test_seed_none_draws_a_seed_and_records_it() -> None:
    hunt = generate_treasure_hunt(seed=None)
    assert isinstance(hunt.config["seed"], int)
    assert digest(generate_treasure_hunt(seed=hunt.config["seed"])) == digest(hunt)


HUNTS_SCRIPT = """
import json
from arena_envs.treasure_hunt import generate_treasure_hunt
hunts = [generate_treasure_hunt(seed=s, difficulty=d) for d in ("easy", "medium", "hard") for s in (0, 1, 12345)]
print(json.dumps([[h.config, h.layout.directories, h.layout.files] for h in hunts]))
"""


def test_hunts_are_identical_across_processes() -> None:
    namespace: dict = {}
    exec(HUNTS_SCRIPT.replace("print(", "result = ("), namespace)
    expected = json.loads(namespace["result"])
    for hash_seed in ("0", "4242"):
        output = subprocess.run(
            [sys.executable, "-c", HUNTS_SCRIPT],
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert json.loads(output) == expected


def read_tree(root: Path) -> tuple[set[str], dict[str, str]]:
    directories = {""}
    files = {}
    for current, dir_names, file_names in os.walk(root):
        relative = Path(current).relative_to(root).as_posix()
        relative = "" if relative == "." else relative
        directories |= {posixpath.join(relative, name) for name in dir_names}
        for name in file_names:
            files[posixpath.join(relative, name)] = (Path(current) / name).read_text(encoding="utf-8")
    return directories, files


def test_disk_hunt_matches_the_memory_hunt_and_records_its_config(tmp_path: Path) -> None:
    on_disk = generate_treasure_hunt(tmp_path / "hunt", seed=21, difficulty="medium")
    in_memory = generate_treasure_hunt(seed=21, difficulty="medium")
    assert in_memory.in_memory and not on_disk.in_memory
    assert on_disk.root == tmp_path / "hunt"
    directories, files = read_tree(on_disk.root)
    assert json.loads(files.pop(CONFIG_FILE)) == on_disk.config == in_memory.config
    assert directories == set(in_memory.layout.directories)
    assert files == in_memory.layout.files


def test_disk_hunt_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(ValueError, match="empty"):
        generate_treasure_hunt(tmp_path, seed=1)
    assert (tmp_path / "precious.txt").read_text() == "keep me"
    assert sorted(os.listdir(tmp_path)) == ["precious.txt"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"depth": 0}, "depth"),
        ({"depth": -3}, "depth"),
        ({"depth": 41}, "depth"),
        ({"depth": 2.5}, "depth"),
        ({"depth": True}, "depth"),
        ({"branching_factor": 0}, "branching_factor"),
        ({"branching_factor": 17}, "branching_factor"),
        ({"file_density": -0.1}, "file_density"),
        ({"file_density": 1.5}, "file_density"),
        ({"file_density": float("nan")}, "file_density"),
        ({"file_density": "dense"}, "file_density"),
        ({"difficulty": "nightmare"}, "difficulty"),
        ({"seed": -1}, "seed"),
        ({"seed": "abc"}, "seed"),
    ],
)
def test_invalid_parameters_raise_a_clear_value_error(arguments: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        generate_treasure_hunt(**{"seed": 0, **arguments})


def test_layout_from_files_builds_the_directories() -> None:
    layout = HuntLayout.from_files({"a/b/c.txt": "x", "top.txt": "y"}, directories=("empty",))
    assert layout.directories == {
        "": (["top.txt"], ["empty", "a"]),
        "empty": ([], []),
        "a": ([], ["b"]),
        "a/b": (["c.txt"], []),
    }


@settings(max_examples=60, deadline=None)
@given(
    depth=st.integers(1, 12),
    branching_factor=st.integers(1, 6),
    file_density=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**64),
)
def test_every_hunt_is_solvable_and_bounded(depth: int, branching_factor: int, file_density: float, seed: int) -> None:
    hunt = generate_treasure_hunt(depth=depth, branching_factor=branching_factor, file_density=file_density, seed=seed)
    read, key = follow_clues(hunt.layout)
    assert key == hunt.config["treasure_key"]
    assert len(read) == depth + 1
    assert max(depth_of(path) for path in hunt.layout.directories) == depth
    assert len(hunt.config["red_herrings"]) >= (branching_factor - 1) * depth
