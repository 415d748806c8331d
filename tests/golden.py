"""Golden trajectories of every env form: fixed seeds, seeded random actions, hashed step by step.

``test_golden.py`` checks that every env form still produces the hashes in
``golden_trajectories.json``. A rule change that alters trajectories on purpose re-records
them, naming the change:

    .venv/bin/python tests/golden.py --write --change "a slow move_to is refused"

which also appends to ``golden_changes.json`` the change and a fingerprint of each form's
new hashes: a golden file that no entry there accounts for fails the test. Every key of
every info is hashed. Only what a rule change or a message rewording cannot reach by
accident is hashed for the tool-call forms: numbers, ends and infos, not message text.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import arena_envs  # noqa: F401
from arena_envs import team_capture_v0

GOLDEN = Path(__file__).with_name("golden_trajectories.json")
CHANGES = Path(__file__).with_name("golden_changes.json")
STEPS = 120
SEED = 11
# Params pinned where a later rule change (the seed's craft range of 3.0) would move the
# trajectories: the refactor is checked against the rules it was recorded with.
CRAFTING = {"craft_range": 2.5}


def digest(value: Any, h: Any) -> None:
    """Feed a canonical encoding of (nested dicts/lists/tuples of) arrays and scalars to ``h``."""
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            h.update(f"<{key}>".encode())
            digest(value[key], h)
    elif isinstance(value, (list, tuple)):
        h.update(f"[{len(value)}".encode())
        for item in value:
            digest(item, h)
    elif isinstance(value, np.ndarray) and value.dtype == object:
        digest(value.tolist(), h)
    elif isinstance(value, (np.ndarray, np.generic)):
        a = np.ascontiguousarray(value)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    elif isinstance(value, float):
        h.update(np.float64(value).tobytes())
    else:
        h.update(repr(value).encode())


def sample(space: Any) -> Any:
    """A random action of ``space``, its move_to speed kept above any floor the rules may set
    for a speed too slow to ever arrive (tightened after recording)."""
    action = space.sample()
    action["move_to"][..., 2] = np.maximum(action["move_to"][..., 2], 0.1)
    return action


def _hash(*parts: Any) -> str:
    h = hashlib.sha256()
    digest(parts, h)
    return h.hexdigest()[:16]


def single(env_id: str, **kwargs: Any) -> list[str]:
    env = gym.make(env_id, **kwargs)
    env.action_space.seed(SEED)
    out = [_hash(*env.reset(seed=SEED))]
    for _ in range(STEPS):
        obs, reward, terminated, truncated, info = env.step(sample(env.action_space))
        out.append(_hash(obs, reward, terminated, truncated, info))
        if terminated or truncated:
            out.append(_hash(*env.reset()))
    return out


def vector(env_id: str, mode: str, num_envs: int = 5, **kwargs: Any) -> list[str]:
    envs = gym.make_vec(env_id, num_envs=num_envs, autoreset_mode=mode, **kwargs)
    return _vector_run(envs)


def _vector_run(envs: Any) -> list[str]:
    envs.action_space.seed(SEED)
    out = [_hash(*envs.reset(seed=SEED))]
    for t in range(STEPS):
        out.append(_hash(*envs.step(sample(envs.action_space))))
        if t == STEPS // 2:  # a partial reset halfway
            mask = np.zeros(envs.num_envs, bool)
            mask[::2] = True
            out.append(_hash(*envs.reset(options={"reset_mask": mask})))
    return out


def parallel() -> list[str]:
    env = team_capture_v0.parallel_env(agents_per_team=2, max_cycles=60)
    for agent in env.possible_agents:
        env.action_space(agent).seed(SEED + len(agent))
    out = [_hash(*env.reset(seed=SEED))]
    for _ in range(STEPS):
        if not env.agents:
            out.append(_hash(*env.reset()))
        actions = {a: sample(env.action_space(a)) for a in env.agents}
        out.append(_hash(*env.step(actions)))
    return out


def aec() -> list[str]:
    env = team_capture_v0.env(agents_per_team=2, max_cycles=30)
    env.reset(seed=SEED)
    for agent in env.possible_agents:
        env.action_space(agent).seed(SEED + len(agent))
    out = []
    for _ in range(STEPS * 2):
        if not env.agents:
            env.reset()
        agent = env.agent_selection
        obs, reward, terminated, truncated, info = env.last()
        out.append(_hash(agent, obs, reward, terminated, truncated, info))
        env.step(None if terminated or truncated else sample(env.action_space(agent)))
    return out


def team_vector(mode: str) -> list[str]:
    return _vector_run(team_capture_v0.vector_env(num_envs=3, agents_per_team=2, max_cycles=40, autoreset_mode=mode))


def pool() -> list[str]:
    """Four ids on a pool of three (one waits for a release), seeded random tool calls."""
    from arena_envs.tools import ToolPool

    rng = np.random.default_rng(SEED)
    names = [f"{kind}{n}" for kind in ("Berry", "Wood", "Stone") for n in (1, 2, 3)]

    def call() -> dict[str, Any]:
        tool = rng.choice(["move_to", "collect", "query_world", "query_inventory", "idle"], p=[.5, .2, .1, .1, .1])
        if tool == "move_to":
            return {"tool": "move_to", "params": {"target": [float(rng.uniform(-20, 20)), 0.0,
                                                             float(rng.uniform(-20, 20))]}}
        if tool == "collect":
            return {"tool": "collect", "params": {"target_name": str(rng.choice(names))}}
        return {"tool": str(tool), "params": {}}

    def numbers(step: Any) -> tuple:
        o = step.observation
        return (o.position, o.health, o.energy, [(i.name, i.quantity) for i in o.inventory],
                o.last_action_result.success if o.last_action_result else None,
                step.reward, step.terminated, step.truncated, step.info)

    async def main() -> list[str]:
        p = ToolPool("arena_envs/Foraging-v0", size=3, timeout=5.0)
        out = []
        for seed, id in enumerate("abc"):
            await p.acquire(id, seed=SEED + seed)
        for t in range(STEPS // 2):
            ids = ["a", "b", "c"] if t % 3 else ["a", "c"]
            steps = await asyncio.gather(*(p.call(call(), id=i) for i in ids))
            out.append(_hash([numbers(s) for s in steps]))
            if t == 20:
                await p.release("b")
                first = await p.acquire("d", seed=SEED + 9)
                out.append(_hash(first.position, first.health))
                await p.release("d")
                await p.acquire("b", seed=SEED + 1)
        return out

    return asyncio.run(main())


def treasure_hunt(mode: str) -> list[str]:
    """The batched hunt: an oracle in even worlds, seeded random calls in odd ones."""
    from arena_envs.treasure_hunt.oracle import OracleAgent

    envs = gym.make_vec("arena_envs/TreasureHunt-v0", num_envs=4, autoreset_mode=mode)
    rng = np.random.default_rng(SEED)
    oracles = [OracleAgent() for _ in range(envs.num_envs)]
    obs, info = envs.reset(seed=SEED)
    out = [_hash(obs, info)]
    calls = [{"tool": "ls"}, {"tool": "pwd"}, {"tool": "cd", "path": ".."}, {"tool": "cat", "file": "start.txt"},
             {"tool": "check_treasure", "key": "0123456789abcdef"}, {"tool": "cd", "path": "/"}]
    for _ in range(STEPS):
        actions = []
        for i, o in enumerate(obs):
            if i % 2 == 0:
                if "[turn 0/" in o:
                    oracles[i].reset()
                actions.append(oracles[i].act(o))
            else:
                actions.append(json.dumps(calls[int(rng.integers(len(calls)))]))
        obs, reward, terminated, truncated, info = envs.step(actions)
        out.append(_hash(obs, reward, terminated, truncated, info))
    return out


def treasure_hunt_single() -> list[str]:
    """The hunt as gym.make gives it (a batch of one, its info as Python scalars): the oracle in even
    episodes, seeded random calls in odd ones, a new hunt after each end."""
    from arena_envs.treasure_hunt.oracle import OracleAgent

    env = gym.make("arena_envs/TreasureHunt-v0")
    rng, oracle = np.random.default_rng(SEED), OracleAgent()
    calls = [{"tool": "ls"}, {"tool": "pwd"}, {"tool": "cd", "path": ".."}, {"tool": "cat", "file": "start.txt"},
             {"tool": "check_treasure", "key": "0123456789abcdef"}, {"tool": "cd", "path": "/"}]
    obs, info = env.reset(seed=SEED)
    out, episode = [_hash(obs, info)], 0  # Python scalars and numpy's hash apart (see digest)
    for _ in range(STEPS):
        action = oracle.act(obs) if episode % 2 == 0 else json.dumps(calls[int(rng.integers(len(calls)))])
        obs, reward, terminated, truncated, info = env.step(action)
        out.append(_hash(obs, reward, terminated, truncated, info))
        if terminated or truncated:
            episode += 1
            oracle.reset()
            obs, info = env.reset()
            out.append(_hash(obs, info))
    return out


FORMS: dict[str, Callable[[], list[str]]] = {
    "foraging_single": lambda: single("arena_envs/Foraging-v0"),
    "foraging_single_classic": lambda: single("arena_envs/Foraging-v0", layout="classic"),
    "crafting_single": lambda: single("arena_envs/Crafting-v0", **CRAFTING),
    "foraging_vector_next": lambda: vector("arena_envs/Foraging-v0", "NextStep", max_ticks=40),
    "foraging_vector_same": lambda: vector("arena_envs/Foraging-v0", "SameStep", max_ticks=40),
    "crafting_vector_next": lambda: vector("arena_envs/Crafting-v0", "NextStep", max_ticks=50, **CRAFTING),
    "crafting_vector_same": lambda: vector("arena_envs/Crafting-v0", "SameStep", max_ticks=50, **CRAFTING),
    "team_parallel": parallel,
    "team_aec": aec,
    "team_vector_next": lambda: team_vector("NextStep"),
    "team_vector_same": lambda: team_vector("SameStep"),
    "foraging_pool": pool,
    "treasure_hunt_vector_next": lambda: treasure_hunt("NextStep"),
    "treasure_hunt_vector_same": lambda: treasure_hunt("SameStep"),
    "treasure_hunt_single": treasure_hunt_single,
}


def record() -> dict[str, list[str]]:
    return {name: form() for name, form in FORMS.items()}


def fingerprint(hashes: list[str]) -> str:
    """One form's recorded hashes in 16 hex digits, as the changes log names them."""
    return hashlib.sha256(json.dumps(hashes).encode()).hexdigest()[:16]


def logged() -> dict[str, str]:
    """Each form's fingerprint as the last entry of the changes log naming it leaves it."""
    forms: dict[str, str] = {}
    for entry in json.loads(CHANGES.read_text()):
        forms.update(entry["forms"])
    return forms


def write(change: str) -> list[str]:
    """Record every form again; log ``change`` with the fingerprints of the forms it moved."""
    recorded, before = record(), logged()
    moved = {name: fingerprint(hashes) for name, hashes in recorded.items() if before.get(name) != fingerprint(hashes)}
    if moved:
        GOLDEN.write_text(json.dumps(recorded, indent=0) + "\n")
        CHANGES.write_text(json.dumps([*json.loads(CHANGES.read_text()), {"change": change, "forms": moved}],
                                      indent=1) + "\n")
    return sorted(moved)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="tests/golden.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="record every form again")
    parser.add_argument("--change", help="with --write: the rule change that moves the trajectories, for the log")
    args = parser.parse_args()
    if args.write and not (args.change or "").strip():
        parser.error("--write needs --change: the rule change that moves the trajectories")
    if args.write:
        print(f"re-recorded (logged in {CHANGES.name}): {', '.join(write(args.change)) or 'nothing moved'}")
    else:
        print(json.dumps({k: len(v) for k, v in record().items()}))
