"""Shared helpers for the Foraging-v0 tests: env makers, action batches, exact comparisons."""

from __future__ import annotations

import os
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import pytest

import arena_envs  # noqa: F401  (registers the environments)
from arena_envs.world import FAR

ENV_ID = "arena_envs/Foraging-v0"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", type=int, default=None, metavar="EXAMPLES",
                     help="run the fuzz and property suites with this many examples each (make soak)")


def pytest_configure(config: pytest.Config) -> None:
    # The fuzz suites read ARENA_FUZZ_EXAMPLES when they are imported, which is after this.
    if config.getoption("--soak"):
        os.environ["ARENA_FUZZ_EXAMPLES"] = str(config.getoption("--soak"))


@pytest.fixture(scope="session", autouse=True)
def sb3_logs_in_the_session_folder(tmp_path_factory) -> None:
    """SB3 makes a ``/tmp/SB3-<time>`` folder for each model built without a log folder (subprocesses too)."""
    os.environ.setdefault("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3")))


@pytest.fixture(scope="module")
def llama():
    """SmolLM2-135M behind llama.cpp's OpenAI server on 127.0.0.1, one per test module (the real-model tier)."""
    from arena_envs.llm.llama_server import INSTALL_HINT, LlamaServer, server_available

    if not server_available():
        pytest.fail(f"the real-model tier needs llama.cpp's server: {INSTALL_HINT}")
    with LlamaServer(threads=2) as server:
        yield server


HALF = 25.0  # default half_size
IDLE_TOOL = 6
QUERY_INVENTORY_TOOL = 4
TOOLS = {"move_to": 0, "collect": 1, "craft": 2, "query_world": 3, "query_inventory": 4, "send_message": 5,
         "idle": 6}


def make_single(**kwargs) -> gym.Env:
    return gym.make(ENV_ID, **kwargs)


def make_vec(num_envs: int, **kwargs) -> gym.vector.VectorEnv:
    return gym.make_vec(ENV_ID, num_envs=num_envs, **kwargs)


# -- actions ---------------------------------------------------------------------------


def full_batch(n: int, tool: int = IDLE_TOOL) -> dict:
    """A valid batch of ``n`` actions, every entry present, all choosing ``tool``."""
    return {
        "tool": np.full(n, tool, np.int64),
        "move_to": np.tile(np.array([0.0, 0.0, 1.0], np.float32), (n, 1)),
        "collect": np.zeros(n, np.int64),
        "craft": np.zeros((n, 2), np.int64),
        "query_world": {"radius": np.full((n, 1), 20.0, np.float32), "filter": np.zeros(n, np.int64)},
        "send_message": np.zeros((n, 2), np.int64),
    }


def copy_action(action):
    if isinstance(action, dict):
        return {k: copy_action(v) for k, v in action.items()}
    return np.array(action, copy=True)


def action_row(action: dict, i: int) -> dict:
    """Env ``i``'s action of a batch, unbatched (the form a single env takes)."""
    out = {}
    for k, v in action.items():
        if isinstance(v, dict):
            out[k] = action_row(v, i)
        else:
            item = np.asarray(v)[i]
            out[k] = item.item() if np.ndim(item) == 0 else item.copy()
    return out


def nearest_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For an observed (B, N, C) entity table: the nearest shown row and whether any is shown."""
    shown = (table[..., 0] > 0) | (table[..., 1] > 0)
    dist = np.where(shown, table[..., 4], np.inf)
    return dist.argmin(1), np.isfinite(dist.min(1))


def policy_actions(rng: np.random.Generator, obs: dict, half_size: float = HALF) -> dict:
    """A seeded, valid, varied batch of actions that also seeks resources and hazards.

    Random targets alone almost never collect or get hurt, so a share of the moves go to
    the nearest shown resource or hazard, and ``collect`` mostly picks the nearest one.
    """
    agent = obs["agent"]
    B = agent.shape[0]
    R = obs["resources"].shape[1]
    tool = rng.choice(7, size=B, p=[0.4, 0.25, 0.03, 0.08, 0.04, 0.04, 0.16])
    x, z = agent[:, 0], agent[:, 1]
    rows = np.arange(B)
    res_row, has_res = nearest_rows(obs["resources"])
    haz_row, has_haz = nearest_rows(obs["hazards"]) if obs["hazards"].shape[1] else (np.zeros(B, int),
                                                                                     np.zeros(B, bool))
    tx = rng.uniform(-half_size, half_size, B).astype(np.float32)
    tz = rng.uniform(-half_size, half_size, B).astype(np.float32)
    mode = rng.integers(0, 3, B)
    to_res = (mode == 1) & has_res
    to_haz = (mode == 2) & has_haz
    res, haz = obs["resources"], obs["hazards"]
    tx = np.where(to_res, x + res[rows, res_row, 2], tx)
    tz = np.where(to_res, z + res[rows, res_row, 3], tz)
    if haz.shape[1]:
        tx = np.where(to_haz, x + haz[rows, haz_row, 2], tx)
        tz = np.where(to_haz, z + haz[rows, haz_row, 3], tz)
    tx = np.clip(tx, -half_size, half_size).astype(np.float32)
    tz = np.clip(tz, -half_size, half_size).astype(np.float32)
    speed = rng.uniform(0.05, 2.0, B).astype(np.float32)
    collect = np.where(has_res & (rng.random(B) < 0.8), res_row, rng.integers(0, R, B))
    return {
        "tool": tool.astype(np.int64),
        "move_to": np.stack([tx, tz, speed], 1),
        "collect": collect.astype(np.int64),
        "craft": np.zeros((B, 2), np.int64),
        "query_world": {"radius": rng.uniform(0.5, 50.0, (B, 1)).astype(np.float32),
                        "filter": rng.integers(0, 5, B)},
        "send_message": np.stack([rng.integers(0, 16, B), rng.integers(0, 2, B)], 1),
    }


# -- state -----------------------------------------------------------------------------


def snapshot(state) -> dict[str, np.ndarray]:
    """A deep copy of every array of a WorldState, by name."""
    return {name: np.array(arr, copy=True) for name, arr in state.arrays()}


def assert_snapshot_equal(got: dict, want: dict, rows=None, msg: str = "") -> None:
    """Every array equal bit for bit (optionally only the batch rows ``rows``)."""
    assert got.keys() == want.keys()
    for name in want:
        a, b = got[name], want[name]
        if rows is not None:
            a, b = a[rows], b[rows]
        assert a.dtype == b.dtype, f"{msg} {name}: dtype {a.dtype} != {b.dtype}"
        np.testing.assert_array_equal(a, b, err_msg=f"{msg} state array {name!r}", strict=True)


def assert_tree_equal(got, want, path: str = "") -> None:
    """Exact equality of (nested dicts of) arrays and scalars."""
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{path}: {type(got).__name__} is not a dict"
        assert got.keys() == want.keys(), f"{path}: keys {sorted(got)} != {sorted(want)}"
        for k in want:
            assert_tree_equal(got[k], want[k], f"{path}.{k}")
    else:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=path)


def obs_row(obs: dict, i: int) -> dict:
    return {k: v[i] for k, v in obs.items()}


# -- hand-built worlds ------------------------------------------------------------------


class World:
    """A vector env of random-layout worlds, emptied, for placing entities by hand.

    Every world starts with its agent at the origin (full health and energy, not moving)
    and no resource, hazard or obstacle; tests place what they need and then ``step``.
    """

    def __init__(self, num_envs: int = 2, resources: int = 3, hazards: int = 2, obstacles: int = 2, **kwargs):
        self.envs = make_vec(num_envs, layout="random", num_resources=resources, num_hazards=hazards,
                             num_obstacles=obstacles, **kwargs)
        self.envs.reset(seed=0)
        self.n = num_envs
        self.scenario = self.envs.unwrapped.scenario
        self.params = self.scenario.params
        self.state = self.envs.unwrapped.state
        self.R = resources
        s = self.state
        s.ent_x[...] = FAR
        s.ent_z[...] = FAR
        s.ent_alive[...] = False
        s.ent_kind[...] = 0
        s.res_total[...] = 0
        s.obst_x[...] = FAR
        s.obst_z[...] = FAR
        s.obst_r[...] = 0.0
        s.in_hazard[...] = False
        for b in range(num_envs):
            self.agent(b, 0.0, 0.0)

    def agent(self, b: int, x: float, z: float) -> None:
        s = self.state
        s.x[b, 0] = x
        s.z[b, 0] = z
        s.target_x[b, 0] = x
        s.target_z[b, 0] = z
        s.moving[b, 0] = False

    def resource(self, b: int, row: int, x: float, z: float, kind: int = 0) -> None:
        s = self.state
        s.ent_x[b, row] = x
        s.ent_z[b, row] = z
        s.ent_kind[b, row] = kind
        s.ent_alive[b, row] = True
        s.res_total[b] = s.ent_alive[b, :self.R].sum()

    def hazard(self, b: int, slot: int, x: float, z: float, kind: int) -> None:
        """``kind`` 0 is a pit, 1 a fire; ``slot`` counts among the hazards."""
        s = self.state
        s.ent_x[b, self.R + slot] = x
        s.ent_z[b, self.R + slot] = z
        s.ent_kind[b, self.R + slot] = kind
        s.ent_alive[b, self.R + slot] = True

    def obstacle(self, b: int, slot: int, x: float, z: float, r: float, kind: int = 1) -> None:
        s = self.state
        s.obst_x[b, slot] = x
        s.obst_z[b, slot] = z
        s.obst_r[b, slot] = r
        s.obst_kind[b, slot] = kind

    def actions(self, tool: int = IDLE_TOOL) -> dict:
        return full_batch(self.n, tool)

    def step(self, action: dict | None = None):
        return self.envs.step(self.actions() if action is None else action)

    def move(self, b: int, x: float, z: float, speed: float = 1.0, others: int = IDLE_TOOL):
        action = self.actions(others)
        action["tool"][b] = TOOLS["move_to"]
        action["move_to"][b] = (x, z, speed)
        return self.step(action)

    def do(self, b: int, tool: str, others: int = IDLE_TOOL, **entries):
        """Step with env ``b`` using ``tool`` (entries override its parameters), others ``others``."""
        return self.step(with_call(self.actions(others), b, tool, entries))


@pytest.fixture
def world():
    """A factory of :class:`World` objects, closed after the test."""
    made = []

    def factory(*args, **kwargs) -> World:
        w = World(*args, **kwargs)
        made.append(w)
        return w

    yield factory
    for w in made:
        w.envs.close()


# -- bad-input corpora: ways to break env j's entry of a batched action -------------------

def break_entry(key: str, value, dtype=None, col: int | None = None) -> Callable:
    """Break env j's entry ``key`` (``query_world.radius`` etc.); ``dtype`` recasts the whole field."""

    def mutate(action: dict, j: int) -> None:
        holder, name = (action["query_world"], key.split(".")[1]) if "." in key else (action, key)
        if dtype is not None:
            holder[name] = holder[name].astype(dtype)
        if col is None:
            holder[name][j] = value
        else:
            holder[name][j, col] = value

    return mutate


def drop_entry(key: str) -> Callable:
    """Remove ``key`` from the whole batched action."""

    def mutate(action: dict, j: int) -> None:
        del action[key]

    return mutate


def bad_clean_noop(base: dict, j: int, tool, mutate: Callable) -> tuple[dict, dict, dict]:
    """From a valid batch ``base``: env j picks ``tool`` with its entries broken by ``mutate``;
    the same batch with env j idling and its entries valid again; and with env j querying
    its inventory (a tool that changes nothing). The other envs act alike in all three."""
    bad = copy_action(base)
    bad["tool"][j] = tool
    mutate(bad, j)
    clean = copy_action(bad)
    clean["tool"][j] = IDLE_TOOL
    for key, value in base.items():  # env j's entries back to valid ones
        if key in clean and key != "tool":
            if isinstance(value, dict):
                for sub in value:
                    clean[key][sub][j] = value[sub][j]
            else:
                clean[key][j] = value[j]
    noop = copy_action(clean)
    noop["tool"][j] = QUERY_INVENTORY_TOOL
    return bad, clean, noop


def with_call(action: dict, b: int, tool: str, entries: dict) -> dict:
    """``action`` with env ``b`` using ``tool``, its ``entries`` set (``radius``/``filter`` for query_world)."""
    action["tool"][b] = TOOLS[tool]
    for key, value in entries.items():
        if key in ("radius", "filter"):
            action["query_world"][key][b] = value
        else:
            action[key][b] = value
    return action
