"""Seeded generator of treasure hunts: a chain of clue files down a golden path of directories.

A hunt is a small directory tree::

    start.txt                      "Next clue: ./amber/lantern.txt"
    amber/                         golden path, depth 1
        lantern.txt                "Follow the trail to ./cedar/moss.txt"
        cedar/                     golden path, depth 2
            moss.txt               ...
            ...                    ... down to depth `depth`, where treasure.txt holds the key
    willow/                        red herring: misleading clue files, maybe nested red herrings

Every clue holds the path of the next clue relative to its own directory; the last one
leads to ``treasure.txt``, which holds a 16-character key. Red-herring directories branch
off every golden directory (``branching_factor - 1`` of them) and hold misleading clues:
dead ends, paths to nowhere, paths to other red herrings and fake treasure keys. Each
directory also receives up to three extra decoy files, each with probability
``file_density``.

The generator draws from its own ``random.Random(seed)`` and a built-in word list, so a
seed gives the same hunt on every machine and Python version. The hunt is built in memory
(``base_path=None``, fast, for batched environments) or written to disk together with
``.treasure_hunt_config.json``, which the game tools never show to the agent.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import random
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, NamedTuple

from arena_envs.treasure_hunt.backends import CONFIG_FILE, DiskBackend, HuntBackend, MemoryBackend

START_FILE = "start.txt"
TREASURE_FILE = "treasure.txt"
KEY_LENGTH = 16
MAX_DEPTH = 40
MAX_BRANCHING_FACTOR = 16
DECOY_SLOTS = 3
NESTED_HERRING_PROBABILITY = 0.5


class HuntParams(NamedTuple):
    depth: int
    branching_factor: int
    file_density: float


PRESETS: dict[str, HuntParams] = {
    "easy": HuntParams(depth=4, branching_factor=2, file_density=0.2),
    "medium": HuntParams(depth=6, branching_factor=3, file_density=0.3),
    "hard": HuntParams(depth=8, branching_factor=4, file_density=0.4),
}

WORDS: tuple[str, ...] = tuple(
    """
    acorn alder amber anchor anvil apple arbor arch arrow ash aspen atlas attic aurora
    badger banner barley barn basin beacon beech bell birch bison blossom bluff bog
    boulder bramble breeze brook bucket burrow cabin cactus canal candle canyon cape
    cavern cedar cellar chalk chapel cherry chest cider cinder citadel clay cliff clover
    coast cobble comet copper coral cottage cove crane crater creek crest crown crystal
    cypress dagger dale delta den desert dew dingle dock dove dune eagle ember falcon
    fable fallow fern ferry fig finch fjord flint forge fossil fountain fox frost garden
    garnet geyser glacier glade glen gorge granite grotto grove gull harbor harvest
    hawk hazel heath hedge heron hill hollow honey horizon hut iris island ivory ivy
    jade jasper jetty juniper kelp kestrel kiln knoll lagoon lake lantern larch lark
    laurel ledge lily linden lodge lotus lynx magnet mango maple marble marsh meadow
    mesa mill mint mist moat moor moss moth nectar nest nettle oak oasis ochre olive
    onyx orchard osprey otter owl paddock pagoda palm pasture pearl pebble pepper
    pier pine plateau plume pond poplar prairie quail quarry quartz quill rain raven
    reed reef ridge river robin rowan ruby rune saddle saffron sage salmon sand scroll
    shell shore sierra silver slate sparrow spire spring spruce stable star stone
    stork stream summit swallow swamp sycamore tarn temple thicket thistle thorn
    thunder tide timber torch tower trail tundra tulip valley vault velvet violet
    walnut wharf willow wind wren yarrow yew zephyr
    """.split()
)

CLUE_TEMPLATES: tuple[str, ...] = (
    "Next clue: {path}",
    "Follow the trail to {path}",
    "The next hint waits in {path}",
    "Your journey continues at {path}",
    "Look inside {path} for what comes next",
)

DEAD_END_TEXTS: tuple[str, ...] = (
    "This trail goes cold. Nothing more to find here.",
    "An empty chest. Someone got here first.",
    "Dust and cobwebs, nothing else.",
    "The map ends here, torn at the edge.",
    "Only an old boot. Try somewhere else.",
)


@dataclass(frozen=True)
class HuntLayout:
    """The contents of a hunt, independent of where it lives.

    ``directories`` maps every directory (the root is ``""``; others are POSIX paths
    relative to the root such as ``"amber/cedar"``) to the names of its files and of its
    subdirectories. ``files`` maps every file's relative path to its text.
    """

    directories: dict[str, tuple[list[str], list[str]]]
    files: dict[str, str]

    @classmethod
    def from_files(cls, files: dict[str, str], directories: tuple[str, ...] = ()) -> HuntLayout:
        """Build a layout from file texts plus optional extra (possibly empty) directories."""
        children: dict[str, tuple[list[str], list[str]]] = {"": ([], [])}

        def add_directory(path: str) -> None:
            if path not in children:
                parent, _, name = path.rpartition("/")
                add_directory(parent)
                children[parent][1].append(name)
                children[path] = ([], [])

        for path in directories:
            add_directory(path)
        for path in files:
            parent, _, name = path.rpartition("/")
            add_directory(parent)
            children[parent][0].append(name)
        return cls(directories=children, files=dict(files))

    def write(self, base_path: str | os.PathLike[str]) -> None:
        """Write the layout below ``base_path`` (which must exist)."""
        base = Path(base_path)
        for directory in self.directories:
            if directory:
                (base / directory).mkdir(parents=True, exist_ok=True)
        for path, text in self.files.items():
            with open(base / path, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(text)


@dataclass(frozen=True)
class TreasureHunt:
    """A generated hunt.

    ``root`` is the directory the agent starts in: the ``Path`` it was written to, or
    ``PurePosixPath("/")`` for an in-memory hunt. Pass the hunt itself as ``hunt_root``
    to the game tools (required for an in-memory hunt; a disk hunt also accepts its
    ``root``). ``config`` is what ``.treasure_hunt_config.json`` holds.
    """

    root: PurePath
    config: dict[str, Any]
    layout: HuntLayout
    backend: HuntBackend

    @property
    def in_memory(self) -> bool:
        return isinstance(self.backend, MemoryBackend)


def generate_treasure_hunt(
    base_path: str | os.PathLike[str] | None = None,
    depth: int | None = None,
    branching_factor: int | None = None,
    file_density: float | None = None,
    seed: int | None = None,
    difficulty: str = "easy",
) -> TreasureHunt:
    """Generate a hunt from a difficulty preset, with optional overrides.

    Args:
        base_path: directory to write the hunt to (created if missing, must be empty);
            ``None`` builds the hunt in memory only.
        depth: directories on the golden path below the root (1 to 40); the treasure
            lies at this depth.
        branching_factor: subdirectories of every golden directory, one of them golden
            (1 to 16).
        file_density: probability in [0, 1] of each of a directory's three decoy-file slots.
        seed: non-negative integer; ``None`` draws one (recorded in the config).
        difficulty: ``"easy"``, ``"medium"`` or ``"hard"``; supplies the parameters not given.

    Raises:
        ValueError: for an unknown difficulty or a parameter out of range, or a
            ``base_path`` that is not an empty directory.
    """
    params = hunt_params(difficulty, depth, branching_factor, file_density)
    if seed is None:
        seed = random.SystemRandom().getrandbits(63)
    elif isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
    seed = int(seed)

    layout, config = _plan_hunt(random.Random(seed), params)
    config = {"seed": seed, "difficulty": difficulty, **params._asdict(), **config}

    if base_path is None:
        backend: HuntBackend = MemoryBackend(layout.directories, layout.files)
        return TreasureHunt(root=backend.root, config=config, layout=layout, backend=backend)

    root = Path(os.path.abspath(base_path))
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ValueError(f"base_path must be an empty or missing directory: {root}")
    root.mkdir(parents=True, exist_ok=True)
    layout.write(root)
    with open(root / CONFIG_FILE, "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2)
    backend = DiskBackend(root)
    return TreasureHunt(root=backend.root, config=config, layout=layout, backend=backend)


def hunt_params(
    difficulty: str = "easy",
    depth: int | None = None,
    branching_factor: int | None = None,
    file_density: float | None = None,
) -> HuntParams:
    """The preset of ``difficulty`` with the given overrides, checked; raises ``ValueError``."""
    if difficulty not in PRESETS:
        raise ValueError(f"unknown difficulty {difficulty!r}; choose one of {sorted(PRESETS)}")
    preset = PRESETS[difficulty]
    depth = preset.depth if depth is None else depth
    branching_factor = preset.branching_factor if branching_factor is None else branching_factor
    file_density = preset.file_density if file_density is None else file_density

    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
        raise ValueError(
            f"depth must be an integer from 1 (a path needs at least one directory) to {MAX_DEPTH}, got {depth!r}"
        )
    if (
        isinstance(branching_factor, bool)
        or not isinstance(branching_factor, int)
        or not 1 <= branching_factor <= MAX_BRANCHING_FACTOR
    ):
        raise ValueError(
            f"branching_factor must be an integer from 1 to {MAX_BRANCHING_FACTOR}, got {branching_factor!r}"
        )
    if (
        isinstance(file_density, bool)
        or not isinstance(file_density, (int, float))
        or not math.isfinite(file_density)
        or not 0.0 <= file_density <= 1.0
    ):
        raise ValueError(f"file_density must be a number in [0, 1], got {file_density!r}")
    return HuntParams(depth, branching_factor, float(file_density))


def _relative_link(from_dir: str, to_path: str) -> str:
    """The path of ``to_path`` as seen from ``from_dir``: ``./a/b.txt`` or ``../../c/d.txt``."""
    source = from_dir.split("/") if from_dir else []
    target = to_path.split("/")
    common = 0
    while common < len(source) and common < len(target) - 1 and source[common] == target[common]:
        common += 1
    ups = len(source) - common
    rest = "/".join(target[common:])
    return "../" * ups + rest if ups else "./" + rest


class _Builder:
    """Accumulates the directories and files of one hunt while it is planned."""

    def __init__(self, rng: random.Random) -> None:
        self.random = rng.random
        self.getrandbits = rng.getrandbits
        self.directories: dict[str, tuple[list[str], list[str]]] = {"": ([], [])}
        self.taken: dict[str, set[str]] = {"": set()}
        self.files: dict[str, str] = {}

    def pick(self, items: tuple[str, ...] | list[str]) -> str:
        return items[int(self.random() * len(items))]

    def fresh_word(self, directory: str) -> str:
        """A word not yet used for any entry of ``directory``."""
        taken = self.taken[directory]
        word = WORDS[int(self.random() * len(WORDS))]
        while word in taken:
            word = WORDS[int(self.random() * len(WORDS))]
        taken.add(word)
        return word

    def add_directory(self, parent: str) -> str:
        name = self.fresh_word(parent)
        path = f"{parent}/{name}" if parent else name
        self.directories[parent][1].append(name)
        self.directories[path] = ([], [])
        self.taken[path] = set()
        return path

    def reserve_file(self, directory: str, stem: str | None = None) -> str:
        """Reserve a ``.txt`` name in ``directory`` (``stem`` if still free) and return its path."""
        taken = self.taken[directory]
        if stem is None or stem in taken:
            stem = self.fresh_word(directory)
        else:
            taken.add(stem)
        name = f"{stem}.txt"
        self.directories[directory][0].append(name)
        return f"{directory}/{name}" if directory else name

    def key(self) -> str:
        return f"{self.getrandbits(4 * KEY_LENGTH):0{KEY_LENGTH}x}"

    def treasure_text(self, key: str) -> str:
        return f"You found the treasure chest!\nTreasure key: {key}"


def _plan_hunt(rng: random.Random, params: HuntParams) -> tuple[HuntLayout, dict[str, Any]]:
    depth, branching_factor, file_density = params
    build = _Builder(rng)
    pick = build.pick

    golden = [""]
    for _ in range(depth):
        golden.append(build.add_directory(golden[-1]))

    red_herrings: list[str] = []
    for level in range(depth):
        for _ in range(branching_factor - 1):
            herring = build.add_directory(golden[level])
            red_herrings.append(herring)
            herring_depth = level + 1
            while herring_depth < depth and rng.random() < NESTED_HERRING_PROBABILITY:
                herring = build.add_directory(herring)
                red_herrings.append(herring)
                herring_depth += 1

    key = build.key()
    chain = [build.reserve_file("", START_FILE.removesuffix(".txt"))]
    chain += [build.reserve_file(golden[level]) for level in range(1, depth)]
    chain.append(build.reserve_file(golden[depth], TREASURE_FILE.removesuffix(".txt")))
    for level, clue in enumerate(chain[:-1]):
        next_clue = chain[level + 1]
        link = "./" + next_clue[len(golden[level]) + 1 :] if level else "./" + next_clue
        build.files[clue] = pick(CLUE_TEMPLATES).format(path=link)
    build.files[chain[-1]] = build.treasure_text(key)

    # Misleading files: first reserve every name, so that a misleading clue can point
    # to any red herring's file, then write the texts.
    kinds = ("dead_end", "nowhere", "herring", "fake_treasure")
    planned: list[tuple[str, str, str]] = []  # (path, kind, directory)

    def plan_misleading(directory: str) -> None:
        kind = pick(kinds)
        stem = TREASURE_FILE.removesuffix(".txt") if kind == "fake_treasure" else None
        planned.append((build.reserve_file(directory, stem), kind, directory))

    for directory in red_herrings:
        plan_misleading(directory)
    herring_files = [path for path, _, _ in planned]
    for directory in golden + red_herrings:
        for _ in range(DECOY_SLOTS):
            if rng.random() < file_density:
                plan_misleading(directory)

    for path, kind, directory in planned:
        if kind == "herring":
            target = pick(herring_files) if herring_files else None
            if target is None or target.rpartition("/")[0] == directory:
                kind = "dead_end"  # no other red herring to point to
        if kind == "dead_end":
            text = pick(DEAD_END_TEXTS)
        elif kind == "fake_treasure":
            text = build.treasure_text(build.key())
        else:
            if kind == "nowhere":
                link = f"./{build.fresh_word(directory)}/{pick(WORDS)}.txt"
            else:
                link = _relative_link(directory, target)
            text = pick(CLUE_TEMPLATES).format(path=link)
        build.files[path] = text

    config = {
        "start_file": START_FILE,
        "golden_path": golden[1:],
        "clue_chain": chain,
        "treasure_path": chain[-1],
        "treasure_key": key,
        "red_herrings": red_herrings,
        "optimal_path_length": depth + 3,
    }
    return HuntLayout(build.directories, build.files), config
