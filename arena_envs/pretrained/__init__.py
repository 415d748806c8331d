"""Trained policies shipped in the package, played by name with a numpy forward pass (no torch).

    from arena_envs.pretrained import load
    policy = load("pretrained", "Foraging-v0")      # this scenario's shipped policy
    policy = load("pretrained:crafting")             # a scenario's, by any spelling of its name
    agent = policy.agent(envs, deterministic=False, seed=0)   # acts on a batch of raw observations

Wherever an agent is named (``arena-eval``, ``arena-agent --others``, ``arena-view --play``,
``training.common.agent_factory`` and so the league) these spellings work:

- ``pretrained``: the shipped policy of the scenario being played;
- ``pretrained:<scenario>``: a scenario's policy by any spelling of its name (it must be the
  scenario being played: a policy fits one observation space);
- a path to a ``.npz`` file written by the exporter (``python -m arena_envs.training.export``).

A file is one ``.npz`` (no pickle): the actor's layers (``policy.<i>.weight`` as (in, out),
``policy.<i>.bias``), its head (``action.weight``, ``action.bias``) and ``metadata``, a JSON
string: the scenario, the flat encoding and env arguments it was trained with (so the agent
rebuilds the same :class:`~arena_envs.wrappers.FlatEncoding`), the activation, and the run that
made it, and ``action_repeat`` and ``decide_on_events``: how long each decision lasts (a
league's learner decides every k-th tick, or on team capture's events, and holds its decision
in between; the agent plays it the same way, see :class:`HeldDecisions`). The critic is left
out: playing needs only the actor. Actions are sampled by default (the policies are trained,
and scored in ``docs/results.md``, that way; a policy without memory can repeat its most
likely action forever), reproducibly from ``seed``.
"""

from __future__ import annotations

import inspect
import json
import math
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from arena_envs.cli import UsageError
from arena_envs.names import SCENARIOS, find, resolve, unknown
from arena_envs.team_capture import decision_events, decision_view
from arena_envs.wrappers.flatten import FlatEncoding, merge_agents, split_agents

FOLDER = Path(__file__).parent
PREFIX = "pretrained"
FORMAT = 1  # of the file: bumped when its layout changes
ACTIVATIONS = {"tanh": np.tanh, "relu": lambda x: np.maximum(x, 0.0)}
# what a file may hold once read, all its arrays together: a shipped policy takes under 2 MB, and
# a small file can declare gigabytes (deflated zeros), so the headers are checked before any inflating
MAX_ARRAY_BYTES = 64 * 2**20
MAX_ARRAYS = 256
NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
ENCODING_KEYS = [name for name, p in inspect.signature(FlatEncoding.__init__).parameters.items()
                 if p.kind is p.KEYWORD_ONLY]


@dataclass
class PretrainedPolicy:
    """A flat-encoded MLP actor: ``layers`` (weight (in, out), bias) with ``activation`` between
    them, then ``head`` giving the logits of every component of the ``nvec`` action side by side."""

    layers: list[tuple[np.ndarray, np.ndarray]]
    head: tuple[np.ndarray, np.ndarray]
    nvec: list[int]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def scenario(self) -> str:
        return self.metadata["scenario"]

    @property
    def encoding(self) -> dict[str, Any]:
        return self.metadata.get("encoding", {})

    @property
    def env_kwargs(self) -> dict[str, Any]:
        return self.metadata.get("env_kwargs", {})

    @property
    def action_repeat(self) -> int:
        return int(self.metadata.get("action_repeat", 1))

    @property
    def decide_on_events(self) -> bool:
        return bool(self.metadata.get("decide_on_events", False))

    @property
    def obs_size(self) -> int:
        return int((self.layers[0][0] if self.layers else self.head[0]).shape[0])

    def logits(self, obs: np.ndarray) -> np.ndarray:
        """The action logits (N, sum(nvec)) of a batch of flat observations (N, obs_size)."""
        activation = ACTIVATIONS[self.metadata.get("activation", "tanh")]
        hidden = np.asarray(obs, np.float32)
        for weight, bias in self.layers:
            hidden = activation(hidden @ weight + bias)
        return hidden @ self.head[0] + self.head[1]

    def predict(self, obs: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        """Flat actions (N, components): each component's most likely choice, or with ``rng`` a
        sample of it (Gumbel-max: the argmax of logits plus Gumbel noise is a categorical sample)."""
        logits = self.logits(obs)
        if rng is not None:
            logits = logits - np.log(rng.exponential(size=logits.shape))
        parts = np.split(logits, np.cumsum(self.nvec)[:-1], axis=-1)
        return np.stack([part.argmax(-1) for part in parts], -1)

    def agent(self, envs: Any, deterministic: bool = False, seed: int = 0) -> PretrainedAgent:
        """The policy acting on ``envs``'s raw observations (an arena env or native vector env)."""
        scenario = envs.unwrapped.scenario
        return PretrainedAgent(self, scenario.observation_space, scenario.action_space, scenario.params,
                               deterministic, seed)

    def save(self, path: str | Path) -> Path:
        """Write the policy as one ``.npz`` (see the module docstring); returns its path."""
        arrays = {}
        for i, (weight, bias) in enumerate(self.layers):
            arrays[f"policy.{i}.weight"], arrays[f"policy.{i}.bias"] = weight, bias
        arrays["action.weight"], arrays["action.bias"] = self.head
        metadata = {**self.metadata, "format": FORMAT, "nvec": [int(n) for n in self.nvec]}
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:  # a file object: np.savez would add ".npz" to another suffix
            np.savez_compressed(fh, metadata=np.array(json.dumps(metadata, sort_keys=True)),
                                **{k: np.asarray(v, np.float32) for k, v in arrays.items()})
        return path

    @classmethod
    def read(cls, path: str | Path) -> PretrainedPolicy:
        """A policy from a file :meth:`save` wrote; anything else is a one-line :class:`UsageError`."""
        try:
            arrays = read_arrays(path)
            metadata = json.loads(str(arrays.pop("metadata")))
            if not isinstance(metadata, dict):
                raise ValueError(f"its metadata is a JSON {type(metadata).__name__}, not an object")
            if metadata.get("format") != FORMAT:
                raise UsageError(f"{path} is a pretrained policy of format {metadata.get('format')}, this version "
                                 f"reads format {FORMAT}: export it again (python -m arena_envs.training.export RUN)")
            policy = cls(*_layers(arrays), _nvec(metadata), metadata)
            _check(policy)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as error:
            raise UsageError(f"{path} is not a pretrained policy (an .npz the exporter wrote): {error}") from None
        return policy


def read_arrays(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz``, none inflated before every header is read: their sizes together are
    refused over :data:`MAX_ARRAY_BYTES`, and Python objects (pickles) are refused."""
    with zipfile.ZipFile(path) as archive:
        entries = archive.infolist()
        if len(entries) > MAX_ARRAYS:
            raise ValueError(f"it holds {len(entries)} entries, more than {MAX_ARRAYS}")
        total = 0
        for entry in entries:
            if not entry.filename.endswith(".npy"):
                raise ValueError(f"{entry.filename} is not an array (.npy)")
            with archive.open(entry) as stream:
                version = np.lib.format.read_magic(stream)
                if version not in NPY_HEADERS:
                    raise ValueError(f"{entry.filename} is an .npy of version {version}, not 1.0 or 2.0")
                shape, _, dtype = NPY_HEADERS[version](stream)
            if dtype.hasobject:
                raise ValueError(f"{entry.filename} holds Python objects")
            total += math.prod(shape) * dtype.itemsize
            if total > MAX_ARRAY_BYTES:
                raise ValueError(f"its arrays declare more than {MAX_ARRAY_BYTES:,} bytes ({entry.filename} "
                                 f"{list(shape)} of {dtype})")
        arrays = {}
        for entry in entries:
            with archive.open(entry) as stream:
                arrays[entry.filename.removesuffix(".npy")] = np.lib.format.read_array(stream, allow_pickle=False)
    return arrays


def _layers(arrays: dict[str, np.ndarray]) -> tuple[list[tuple[np.ndarray, np.ndarray]], tuple[np.ndarray, np.ndarray]]:
    """The layers ``policy.<i>.weight``/``bias`` (i = 0, 1 ...) and the head; any other array is refused."""
    count = 0
    while f"policy.{count}.weight" in arrays:
        count += 1
    names = [f"policy.{i}.{part}" for i in range(count) for part in ("weight", "bias")] + ["action.weight",
                                                                                           "action.bias"]
    if set(arrays) != set(names):
        raise ValueError(f"it holds the arrays {sorted(arrays)}, not {names}")
    layers = [(arrays[f"policy.{i}.weight"], arrays[f"policy.{i}.bias"]) for i in range(count)]
    return layers, (arrays["action.weight"], arrays["action.bias"])


def _nvec(metadata: dict[str, Any]) -> list[int]:
    nvec = metadata.get("nvec")
    if not isinstance(nvec, list) or not nvec or not all(type(n) is int and n >= 1 for n in nvec):
        raise ValueError(f"its metadata's nvec is {nvec!r}, not a list of action sizes")
    return nvec


def _check(policy: PretrainedPolicy) -> None:
    """What playing ``policy`` relies on, checked before it plays: its metadata's entries, and
    layers whose shapes chain from the observation to the ``nvec`` logits."""
    meta = policy.metadata
    if meta.get("scenario") not in SCENARIOS:
        raise ValueError(f"its metadata names the scenario {meta.get('scenario')!r}, none of {list(SCENARIOS)}")
    if meta.get("activation", "tanh") not in ACTIVATIONS:
        raise ValueError(f"its activation {meta.get('activation')!r} is none of {list(ACTIVATIONS)}")
    for key in ("encoding", "env_kwargs"):
        if not isinstance(meta.get(key, {}), dict):
            raise ValueError(f"its metadata's {key} is not an object")
    unknown = set(policy.encoding) - set(ENCODING_KEYS)
    if unknown:
        raise ValueError(f"its encoding names {sorted(unknown)}, none of the encoding's keys {ENCODING_KEYS}")
    if policy.encoding.get("dict_obs"):
        raise ValueError("its encoding asks for dict observations: a policy file plays the flat one")
    if type(meta.get("action_repeat", 1)) is not int or meta.get("action_repeat", 1) < 1 or \
            not isinstance(meta.get("decide_on_events", False), bool):
        raise ValueError("its action_repeat is not a positive integer or decide_on_events not true or false")
    size = None
    for name, (weight, bias) in zip([*(f"policy.{i}" for i in range(len(policy.layers))), "action"],
                                    [*policy.layers, policy.head], strict=True):
        if weight.ndim != 2 or bias.shape != weight.shape[1:] or (size is not None and weight.shape[0] != size) or \
                not (np.issubdtype(weight.dtype, np.floating) and np.issubdtype(bias.dtype, np.floating)):
            raise ValueError(f"{name} is weights {list(weight.shape)} of {weight.dtype} and biases {list(bias.shape)} "
                             f"of {bias.dtype}, after a layer of {size}: not float layers that chain")
        size = weight.shape[1]
    if size != sum(policy.nvec):
        raise ValueError(f"its head gives {size} logits, its nvec {policy.nvec} {sum(policy.nvec)}")


class PretrainedAgent:
    """A :class:`PretrainedPolicy` acting on batches of raw observations, as every agent of
    ``training.common`` does: (B, ...) arrays, or (B, agents, ...) for one team of team capture."""

    def __init__(self, policy: PretrainedPolicy, observation_space: Any, action_space: Any, params: Any,
                 deterministic: bool = False, seed: int = 0):
        self.policy = policy
        try:
            self.encoding = FlatEncoding(observation_space, action_space, params, **policy.encoding)
        except (TypeError, ValueError) as error:
            raise UsageError(f"the pretrained {policy.scenario} policy's encoding {policy.encoding} does not "
                             f"encode this env: {error}") from None
        given = (int(np.prod(self.encoding.observation_space.shape)), [int(n) for n in self.encoding.action_space.nvec])
        if given != (policy.obs_size, list(policy.nvec)):
            raise UsageError(f"the pretrained {policy.scenario} policy does not fit this env: it takes observations "
                             f"of size {policy.obs_size} and actions {list(policy.nvec)}, the env gives {given[0]} "
                             f"and {given[1]}; play it with its own env arguments {policy.env_kwargs}")
        self.rng = None if deterministic else np.random.default_rng(seed)
        self.held = HeldDecisions(policy.action_repeat, params.max_ticks, policy.decide_on_events)

    def act(self, obs: dict[str, np.ndarray]) -> dict[str, Any]:
        agents = obs["agent"].shape[1] if obs["agent"].ndim == 3 else None  # a team: one row per agent
        rows = merge_agents(obs, agents)
        flat = self.policy.predict(self.encoding.observe(rows), self.rng)
        return self.held(obs, split_agents(self.encoding.decode(flat, rows), agents))


class HeldDecisions:
    """Decisions held as a league's learner was trained (``training/league.py``): a world takes
    new ``actions`` when its episode starts and then every ``every`` ticks (``league.action_repeat``,
    read from ``time_left``), or with ``on_events`` (``league.decide_on_events``) on the tick
    after a team capture event (:func:`~arena_envs.team_capture.decision_events`) and after at
    most ``every`` ticks; it repeats its last decision on the others."""

    def __init__(self, every: int, max_ticks: int, on_events: bool = False):
        self.every, self.max_ticks, self.on_events = int(every), int(max_ticks), bool(on_events)
        self.held: Any = None  # the decisions being held, per world
        self.view: Any = None  # with on_events: the last observation's decision_view
        self.age = np.zeros(0, np.int64)  # with on_events: ticks since each world's decision

    def __call__(self, obs: dict[str, np.ndarray], actions: Any) -> Any:
        if self.every == 1:
            return actions
        one_world = obs["agent"].ndim == 2  # one world's team, (N, ...), as a chat match's controller gives it
        worlds = {key: value[None] for key, value in obs.items()} if one_world else obs  # (B, N, ...)
        time_left = worlds["time_left"]
        tick = self.max_ticks - time_left.reshape(len(time_left), -1)[:, 0]
        fresh = self.held is None or len(self.held["tool"]) != len(actions["tool"])
        view = decision_view(worlds) if self.on_events else None
        if fresh:
            decide = np.ones(len(tick), bool)
            self.held, self.age = _copy(actions), np.zeros(len(tick), np.int64)
        elif self.on_events:
            decide = (tick == 0) | (self.age >= self.every) | decision_events(self.view, view)
        else:
            decide = tick % self.every == 0  # (B,): this world's tick starts a decision
        if self.on_events:
            self.view, self.age = view, np.where(decide, 1, self.age + 1)
        return _hold(self.held, actions, np.repeat(decide, len(actions["tool"])) if one_world else decide)


def _copy(tree: Any) -> Any:
    return {k: _copy(v) for k, v in tree.items()} if isinstance(tree, dict) else np.array(tree)


def _hold(held: Any, new: Any, decide: np.ndarray) -> Any:
    """``held`` (a tree of (B, ...) arrays) with the worlds where ``decide`` is true taken from ``new``,
    in place; returns a copy."""
    if isinstance(held, dict):
        return {k: _hold(held[k], new[k], decide) for k in held}
    held[decide] = new[decide]
    return held.copy()


def scenario_of(name: str, env: str | None = None) -> str | Path | None:
    """What an agent's name asks for when it names a pretrained policy: the scenario key
    (``pretrained`` with ``env``, ``pretrained:<scenario>``) or the path of a ``.npz``; None for
    any other name. ``pretrained:<scenario>`` must be ``env``'s scenario when ``env`` is given."""
    head, sep, tail = name.partition(":")
    if head == PREFIX and not sep:
        if env is None:
            raise UsageError(f"'{PREFIX}' names the shipped policy of the scenario played: "
                             f"say which with '{PREFIX}:<scenario>' ({', '.join(shipped())})")
        return resolve(env).key
    if head == PREFIX:
        scenario = find(tail)
        if scenario is None:
            raise UsageError(unknown(tail, "pretrained policy", shipped(), [f"{PREFIX}:{s}" for s in shipped()]))
        if env is not None and resolve(env).key != scenario.key:
            raise UsageError(f"{name} plays {scenario.short_id}, not {resolve(env).short_id}: "
                             f"name '{PREFIX}' for the scenario's own policy")
        return scenario.key
    if name.endswith(".npz"):
        return Path(name)
    return None


def shipped() -> list[str]:
    """The scenarios with a policy in the package, in the docs' order."""
    return [key for key in SCENARIOS if (FOLDER / f"{key}.npz").exists()]


def path_of(scenario: str) -> Path:
    """The shipped policy file of ``scenario`` (a key)."""
    return FOLDER / f"{scenario}.npz"


def load(name: str, env: str | None = None) -> PretrainedPolicy:
    """The policy ``name`` names (see the module docstring), for the scenario ``env`` if given."""
    target = scenario_of(name, env)
    if target is None:
        raise UsageError(f"{name!r} names no pretrained policy: '{PREFIX}', '{PREFIX}:<scenario>' or a .npz path")
    if isinstance(target, Path):
        if not target.exists():
            raise UsageError(f"no pretrained policy at {target}")
        policy = PretrainedPolicy.read(target)
        if env is not None and policy.scenario != resolve(env).key:
            raise UsageError(f"{target} is a policy of {resolve(policy.scenario).short_id}, not "
                             f"{resolve(env).short_id}")
        return policy
    if not path_of(target).exists():
        raise UsageError(f"no pretrained policy ships for {resolve(target).short_id} "
                         f"(shipped: {', '.join(shipped()) or 'none'})")
    return PretrainedPolicy.read(path_of(target))


def is_pretrained(name: str) -> bool:
    """Whether ``name`` is spelt as a pretrained policy (``pretrained``, ``pretrained:...``, ``*.npz``)."""
    return name.partition(":")[0] == PREFIX or name.endswith(".npz")
