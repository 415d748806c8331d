"""``arena-bench``: steps per second of every interface, measured in one run.

Each row steps an env with random valid actions (sampled ahead of time, so sampling is
not timed) for at least ``--seconds`` and reports steps/s: the best of three windows of a
third of that time, as ``timeit`` advises, since a busy machine only ever slows a run
down. The ratios at the bottom
compare rows of the same run: the native batch against a ``SyncVectorEnv`` of single
envs (what a user would otherwise build), and against Gymnasium's own ``CartPole-v1``
vector env as a reference for the speed of this machine.

    arena-bench                      # the full table
    arena-bench --seconds 0.5 --json results.json
    arena-bench --only serve --against HEAD~1    # this checkout against a commit, in the same run
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

import arena_envs  # noqa: F401  (registers the envs)
from arena_envs.cli import arena_bench
from arena_envs.names import UnknownNameError, find, unknown

ACTION_POOL = 16  # distinct pre-sampled action batches cycled through
WINDOWS = 3  # each row is the best of this many timing windows


def _rate(step: Callable[[int], None], units_per_step: int, seconds: float) -> float:
    """Units per second of ``step(i)``, after a short warm-up: the best of :data:`WINDOWS`."""
    for i in range(3):
        step(i)
    done, best = 0, 0.0
    for _ in range(WINDOWS):
        start, count = time.perf_counter(), 0
        while True:
            for _ in range(10):
                step(done + count)
                count += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds / WINDOWS:
                break
        done += count
        best = max(best, count * units_per_step / elapsed)
    return best


def vector_rate(env_id: str, num_envs: int, seconds: float, **kwargs) -> float:
    """Env-steps/s of ``gym.make_vec`` (the native vector env unless kwargs say otherwise)."""
    envs = gym.make_vec(env_id, num_envs=num_envs, **kwargs)
    envs.reset(seed=0)
    envs.action_space.seed(0)
    pool = [envs.action_space.sample() for _ in range(ACTION_POOL)]
    rate = _rate(lambda i: envs.step(pool[i % ACTION_POOL]), num_envs, seconds)
    envs.close()
    return rate


def single_rate(env_id: str, seconds: float, **kwargs) -> float:
    """Steps/s of one ``gym.make`` env, resetting when an episode ends."""
    env = gym.make(env_id, **kwargs)
    env.reset(seed=0)
    env.action_space.seed(0)
    pool = [env.action_space.sample() for _ in range(ACTION_POOL)]

    def step(i):
        _, _, terminated, truncated, _ = env.step(pool[i % ACTION_POOL])
        if terminated or truncated:
            env.reset()

    rate = _rate(step, 1, seconds)
    env.close()
    return rate


def foraging_rows(seconds: float) -> list[tuple[str, float, str]]:
    env_id = "arena_envs/Foraging-v0"
    rows = [(f"Foraging native batch B={b}", vector_rate(env_id, b, seconds), "env-steps/s")
            for b in (1, 64, 1024, 4096)]
    rows.append(("Foraging single env (gym.make)", single_rate(env_id, seconds), "env-steps/s"))
    rows.append(("Foraging SyncVectorEnv of 64 single envs",
                 vector_rate(env_id, 64, seconds, vectorization_mode="sync"), "env-steps/s"))
    return rows


def crafting_rows(seconds: float) -> list[tuple[str, float, str]]:
    env_id = "arena_envs/Crafting-v0"
    rows = [(f"Crafting native batch B={b}", vector_rate(env_id, b, seconds), "env-steps/s")
            for b in (1, 64, 1024, 4096)]
    rows.append(("Crafting single env (gym.make)", single_rate(env_id, seconds), "env-steps/s"))
    return rows


def team_capture_rows(seconds: float, agents_per_team: int = 4) -> list[tuple[str, float, str]]:
    """Agent-steps/s of Team Capture: the batched ``vector_env`` and the PettingZoo ``parallel_env``."""
    from arena_envs import team_capture_v0

    agents = 2 * agents_per_team
    label = f"Team capture {agents_per_team}v{agents_per_team}"

    def vector(num_envs: int) -> float:
        envs = team_capture_v0.vector_env(num_envs=num_envs, agents_per_team=agents_per_team)
        envs.reset(seed=0)
        envs.action_space.seed(0)
        pool = [envs.action_space.sample() for _ in range(ACTION_POOL)]
        return _rate(lambda i: envs.step(pool[i % ACTION_POOL]), num_envs * agents, seconds)

    def parallel() -> float:
        env = team_capture_v0.parallel_env(agents_per_team=agents_per_team)
        env.reset(seed=0)
        for i, agent in enumerate(env.possible_agents):
            env.action_space(agent).seed(i)
        pool = [{a: env.action_space(a).sample() for a in env.possible_agents} for _ in range(ACTION_POOL)]

        def step(i):
            env.step(pool[i % ACTION_POOL])
            if not env.agents:
                env.reset()

        return _rate(step, agents, seconds)

    rows = [(f"{label} vector_env B={b}", vector(b), "agent-steps/s") for b in (64, 1024, 4096)]
    rows.append((f"{label} PettingZoo parallel_env", parallel(), "agent-steps/s"))
    return rows


def reference_rows(seconds: float) -> list[tuple[str, float, str]]:
    return [("CartPole-v1 native vector env B=4096 (reference)",
             vector_rate("CartPole-v1", 4096, seconds, vectorization_mode="vector_entry_point"), "env-steps/s")]



# -- on a device (torch, DESIGN §19) ------------------------------------------------------

DEVICE_SIZES = (8192, 65536, 262144, 1048576)
MODES = ("eager", "compiled")  # a device step as torch runs it op by op, and through torch.compile


def device_actions(env: Any, count: int, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` batches of random valid actions drawn on the env's device, ahead of time:
    arrays (B,) or, with agents, (B, A)."""
    import torch

    gen = torch.Generator(device=env.device).manual_seed(seed)
    space, shape, dev = env.scenario.action_space, env._shape, env.device
    w = float(env.scenario.params.half_size)

    def ints(high: int) -> Any:
        return torch.randint(0, int(high), shape, generator=gen, device=dev)

    def uniform(low: float, high: float) -> Any:
        return low + (high - low) * torch.rand(shape, generator=gen, device=dev)

    def pair(nvec: Any) -> Any:
        return torch.stack([ints(nvec[0]), ints(nvec[1])], dim=-1)

    return [{"tool": ints(7),
             "move_to": torch.stack([uniform(-w, w), uniform(-w, w), uniform(0.5, 2.0)], dim=-1),
             "collect": ints(space["collect"].n), "craft": pair(space["craft"].nvec),
             "query_world": {"radius": uniform(1.0, 50.0)[..., None], "filter": ints(5)},
             "send_message": pair(space["send_message"].nvec)}
            for _ in range(count)]


def device_rate(env: Any, seconds: float) -> float:
    """Env-steps/s of a device env on pre-drawn actions, the device synchronised at each window's end."""
    import torch

    env.reset(seed=0)
    pool = [env.decode(a) for a in device_actions(env, ACTION_POOL)]  # decoded: the step alone is timed
    sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)

    def step(i: int) -> None:
        env.batch.autostep(pool[i % ACTION_POOL])
        if i % 10 == 9:
            sync()

    return _rate(step, env.num_envs, seconds)


def device_rows(seconds: float, device: str | None = None, sizes: tuple[int, ...] = DEVICE_SIZES,
                modes: tuple[str, ...] = MODES) -> list[tuple[str, float, str]]:
    """Foraging on torch tensors at each batch size, eager and compiled (torch.compile)."""
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    rows = []
    for b in sizes:
        for compiled in (mode == "compiled" for mode in modes):
            env = gym.make_vec("arena_envs/Foraging-v0", num_envs=b, device=device, compile=compiled)
            label = f"Foraging on {device} B={b}, {'compiled' if compiled else 'eager'}"
            rows.append((label, device_rate(env, seconds), "env-steps/s"))
            env.close()
            print(f"{label}: {rows[-1][1]:,.0f}", file=sys.stderr, flush=True)
    return rows


def team_device_rows(seconds: float, device: str | None = None, sizes: tuple[int, ...] = DEVICE_SIZES,
                     modes: tuple[str, ...] = MODES, agents_per_team: int = 4) -> list[tuple[str, float, str]]:
    """Team capture on torch tensors at each batch size, eager and compiled: agent-steps/s."""
    import torch

    from arena_envs import team_capture_v0

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    rows = []
    for b in sizes:
        for compiled in (mode == "compiled" for mode in modes):
            env = team_capture_v0.vector_env(num_envs=b, agents_per_team=agents_per_team, device=device,
                                             compile=compiled)
            label = (f"Team capture {agents_per_team}v{agents_per_team} on {device} B={b}, "
                     f"{'compiled' if compiled else 'eager'}")
            rows.append((label, device_rate(env, seconds) * 2 * agents_per_team, "agent-steps/s"))
            env.close()
            print(f"{label}: {rows[-1][1]:,.0f}", file=sys.stderr, flush=True)
    return rows


def peer_rows(seconds: float, sizes: tuple[int, ...] = (65536, 262144)) -> list[tuple[str, float, str]]:
    """What a user would otherwise run on a GPU, in the same run, when installed (the ``peers``
    extra): VMAS ``simple_tag`` (torch) and JaxMARL ``MPE_simple_tag_v3`` (jit, vmap, a scan of
    100 steps, resets included), random actions. A peer that is missing gives no row."""
    rows: list[tuple[str, float, str]] = []
    for b in sizes:
        for name, rate in (("VMAS simple_tag", _vmas_rate), ("JaxMARL MPE_simple_tag_v3", _jaxmarl_rate)):
            try:
                value = rate(b, seconds)
            except ImportError as err:
                print(f"{name}: not installed ({err})", file=sys.stderr, flush=True)
                continue
            rows.append((f"{name} on cuda B={b}", value, "agent-steps/s"))
            print(f"{rows[-1][0]}: {value:,.0f}", file=sys.stderr, flush=True)
    return rows


def _vmas_rate(num_envs: int, seconds: float) -> float:
    import torch
    import vmas

    env = vmas.make_env("simple_tag", num_envs=num_envs, device="cuda", continuous_actions=False, seed=0)
    env.reset()
    agents = len(env.agents)
    pool = [[torch.randint(0, 5, (num_envs,), device="cuda") for _ in range(agents)] for _ in range(ACTION_POOL)]

    def step(i: int) -> None:
        env.step(pool[i % ACTION_POOL])
        if i % 10 == 9:
            torch.cuda.synchronize()

    return _rate(step, num_envs * agents, seconds)


def _jaxmarl_rate(num_envs: int, seconds: float, scan: int = 100) -> float:
    import jax

    simple_tag = _jaxmarl_simple_tag()
    env = simple_tag.SimpleTagMPE()
    keys = jax.random.split(jax.random.PRNGKey(0), num_envs)
    obs, state = jax.vmap(env.reset)(keys)
    agents = env.agents

    def one(carry, key):
        state, key_step = carry
        k_act, k_step, key_step = jax.random.split(key_step, 3)
        acts = {a: jax.random.randint(jax.random.fold_in(k_act, i), (num_envs,), 0, 5) for i, a in enumerate(agents)}
        _, state, _, _, _ = jax.vmap(env.step)(jax.random.split(k_step, num_envs), state, acts)
        return (state, key_step), None

    @jax.jit
    def rollout(state, key):
        (state, key), _ = jax.lax.scan(one, (state, key), None, length=scan)
        return state, key

    carry = [state, jax.random.PRNGKey(1)]

    def step(i: int) -> None:
        carry[0], carry[1] = rollout(carry[0], carry[1])
        jax.block_until_ready(carry[0])

    return _rate(step, num_envs * len(agents) * scan, seconds)


def _jaxmarl_simple_tag():
    """JaxMARL's MPE simple_tag without ``import jaxmarl``, whose registry imports every env
    family and their dependencies (brax among them); the MPE modules need jax, flax and chex."""
    import importlib
    import importlib.util
    import sys as _sys
    import types

    if "jaxmarl" in _sys.modules:  # ours from an earlier call, or a real import
        return importlib.import_module("jaxmarl.environments.mpe.simple_tag")
    spec = importlib.util.find_spec("jaxmarl")
    if spec is None:
        raise ImportError("jaxmarl is not installed")
    root = spec.submodule_search_locations[0]
    for name, path in (("jaxmarl", root), ("jaxmarl.environments", root + "/environments")):
        if name not in _sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [path]
            _sys.modules[name] = module
    return importlib.import_module("jaxmarl.environments.mpe.simple_tag")

TOOL_CALLS = [{"tool": "move_to", "params": {"target": [float(x), 0.0, float(-x)]}} for x in range(-10, 10)]
TOOL_CALLS += [{"tool": "query_world", "params": {"radius": 15}}, '{"tool": "idle", "params": {}}']


def _sessions_against_loop(seconds: float, sessions: int, call: Callable[[Any, int], Any],
                           acquire: Callable[[int], Any]) -> tuple[float, float]:
    """Calls/s of ``sessions`` async sessions (``await call(tool_call, i)``) against a loop over
    as many wrapped single envs, each seeded as its session.

    The two rates' timing windows alternate, many short ones, so that both see the same
    states of a machine whose speed drifts, and each keeps its best window.
    """
    import asyncio

    from arena_envs.wrappers import ToolCallWrapper

    windows = 4 * WINDOWS
    window = seconds / windows
    made = list(range(sessions))  # session i's next call is TOOL_CALLS[made[i] % len(TOOL_CALLS)]

    async def sessions_window(seconds: float) -> float:
        done, start = 0, time.perf_counter()

        async def session(i):
            nonlocal done
            while time.perf_counter() - start < seconds:
                await call(TOOL_CALLS[made[i] % len(TOOL_CALLS)], i)
                made[i] += 1
                done += 1

        await asyncio.gather(*(session(i) for i in range(sessions)))
        return done / (time.perf_counter() - start)

    async def acquire_all() -> None:
        for i in range(sessions):
            await acquire(i)

    envs = [ToolCallWrapper(gym.make("arena_envs/Foraging-v0")) for _ in range(sessions)]
    for i, env in enumerate(envs):
        env.reset(seed=i)

    def loop_window(seconds: float) -> float:
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            env = envs[done % sessions]  # round after round over the envs, as the sessions go
            env.step(TOOL_CALLS[(done // sessions + done) % len(TOOL_CALLS)])
            done += 1
        return done / (time.perf_counter() - start)

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(acquire_all())
        loop.run_until_complete(sessions_window(0.05))  # warm-up
        loop_window(0.05)
        session_rates, loop_rates = [], []
        for _ in range(windows):
            session_rates.append(loop.run_until_complete(sessions_window(window)))
            loop_rates.append(loop_window(window))
    finally:
        loop.close()
    return max(session_rates), max(loop_rates)


def tool_call_rows(seconds: float, sessions: int = 256) -> list[tuple[str, float, str]]:
    """Tool calls/s: the async pool stepping all sessions together vs a loop over wrapped single envs."""
    from arena_envs.tools import ToolPool

    pool = ToolPool("arena_envs/Foraging-v0", size=sessions)
    pooled, looped = _sessions_against_loop(seconds, sessions, lambda c, i: pool.call(c, id=i),
                                            lambda i: pool.acquire(i, seed=i))
    return [(f"Tool calls: ToolPool, {sessions} async sessions", pooled, "calls/s"),
            (f"Tool calls: ToolCallWrapper loop over {sessions} single envs", looped, "calls/s")]


def tool_reset_rows(seconds: float, sessions: int = 256) -> list[tuple[str, float, str]]:
    """Resets/s when ``sessions`` ids reset at once (a group of rollouts starting): the pool
    resets them as one batch; the loop resets as many wrapped single envs one after another."""
    import asyncio

    from arena_envs.tools import ToolPool
    from arena_envs.wrappers import ToolCallWrapper

    pool = ToolPool("arena_envs/Foraging-v0", size=sessions)
    envs = [ToolCallWrapper(gym.make("arena_envs/Foraging-v0")) for _ in range(sessions)]
    seeds = iter(range(10**9))  # every round of resets lays out new worlds

    loop = asyncio.new_event_loop()

    async def acquire_all() -> None:
        await asyncio.gather(*(pool.acquire(i, seed=next(seeds)) for i in range(sessions)))

    def pool_round() -> None:
        loop.run_until_complete(acquire_all())

    def loop_round() -> None:
        for env in envs:
            env.reset(seed=next(seeds))

    def rate(round_: Callable[[], None], seconds: float) -> float:
        done, start = 0, time.perf_counter()
        while done == 0 or time.perf_counter() - start < seconds:
            round_()
            done += sessions
        return done / (time.perf_counter() - start)

    try:
        windows = [(rate(pool_round, seconds / 2 / WINDOWS), rate(loop_round, seconds / 2 / WINDOWS))
                   for _ in range(WINDOWS)]  # alternating, as in _sessions_against_loop
    finally:
        loop.close()
    return [(f"Tool resets: ToolPool, {sessions} ids at once", max(w[0] for w in windows), "resets/s"),
            (f"Tool resets: ToolCallWrapper loop over {sessions} single envs", max(w[1] for w in windows),
             "resets/s")]


def stateful_tool_rows(seconds: float, ids: int = 256) -> list[tuple[str, float, str]]:
    """Stateful-tool calls/s: ``await act(call, id=i)`` for ``ids`` ids, a tool whose ``env_cls``
    is Foraging (so the generic stateful-tool path runs on the batched pool), vs a loop over
    wrapped single envs."""
    from arena_envs.tools import tool

    @tool(env_cls="arena_envs/Foraging-v0", stateful=True, pool_size=ids)
    async def act(call: Any, env) -> float:
        """One universal tool call in the id's world; returns the reward."""
        return (await env.step(call)).reward

    stateful, looped = _sessions_against_loop(seconds, ids, lambda c, i: act(c, id=i),
                                              lambda i: act.pool.acquire(i, seed=i))
    return [(f"Stateful tool (env_cls=Foraging), {ids} ids", stateful, "calls/s"),
            (f"Stateful tool baseline: loop over {ids} single envs", looped, "calls/s")]


def treasure_hunt_rows(seconds: float) -> list[tuple[str, float, str]]:
    from arena_envs.treasure_hunt.bench import bench_rows

    return bench_rows(seconds)


def serve_rows(seconds: float) -> list[tuple[str, float, str]]:
    """arena-serve against a stock one-env-per-session OpenEnv server (needs the ``serve`` extra)."""
    from arena_envs.serve.bench import bench_rows

    return bench_rows(seconds)


def serve_stall_rows(seconds: float) -> list[tuple[str, float, str]]:
    """A served session's step latency alone, beside clients sending stall messages and beside
    slowloris sockets from another address, with the new sessions refused under each (needs ``serve``)."""
    from arena_envs.serve.bench import stall_rows

    return stall_rows(seconds)


def mcp_rows(seconds: float) -> list[tuple[str, float, str]]:
    """Episodes/s through arena-serve's MCP door against our own runner, on the same hunts (needs ``serve``)."""
    from arena_envs.serve.mcp_bench import mcp_rows as rows

    return rows(seconds)


def sharded_rows(seconds: float, num_envs: int = 8192) -> list[tuple[str, float, str]]:
    """Env-steps/s of one Foraging batch unsharded (``num_workers=1``) and split over 2 processes
    (:class:`~arena_envs.sharded.ShardedVectorEnv`, what ``gym.make_vec(..., num_workers=2)``
    builds: this process and one worker), returning copies of the observations or views of
    shared memory (``copy=False``, what the lean PPO uses). The envs take turns, many short
    windows each, so that all see the same states of a machine whose load drifts."""
    from arena_envs.sharded import ShardedVectorEnv

    labels = {None: f"Foraging B={num_envs}, num_workers=1 (the native batch)",
              True: f"Foraging B={num_envs}, num_workers=2",
              False: f"Foraging B={num_envs}, num_workers=2, copy=False"}
    envs = {copy: gym.make_vec("arena_envs/Foraging-v0", num_envs=num_envs) if copy is None
            else ShardedVectorEnv(num_envs, 2, env_id="arena_envs/Foraging-v0", copy=copy) for copy in labels}
    try:
        pools = {}
        for w, env in envs.items():
            env.reset(seed=0)
            env.action_space.seed(0)
            pools[w] = [env.action_space.sample() for _ in range(ACTION_POOL)]
        best = dict.fromkeys(labels, 0.0)
        for _ in range(4 * WINDOWS):
            for w, env in envs.items():
                pool = pools[w]
                best[w] = max(best[w], _rate(lambda i, env=env, pool=pool: env.step(pool[i % ACTION_POOL]),
                                             num_envs, seconds / (4 * WINDOWS)))
    finally:
        for env in envs.values():
            env.close()
    return [(labels[w], best[w], "env-steps/s") for w in labels]


TRAINING_ROW = "Lean PPO training on Foraging (config ppo/foraging)"
TRAINING_ENV_ROW = "Lean PPO's Foraging envs alone (config ppo/foraging, random actions)"
TRAINING_SYNC_ROW = "Lean PPO training on Foraging, the update in-process (async_learner: false)"


def training_rows(seconds: float) -> list[tuple[str, float, str]]:
    """The lean PPO's training steps/s on Foraging (its shipped config, ``ppo/foraging``: rollouts,
    updates and all; the update in a learner process) and with the update in the trainer's process,
    against the env-steps/s of the same flat-encoded batch stepped alone with random actions, in the
    same run: the ratio is the share of the env's speed that training keeps."""
    import tempfile

    from arena_envs.training import ppo
    from arena_envs.training.common import load_config

    config = load_config("Foraging-v0", "ppo/foraging")
    config.update(timesteps=10**12, checkpoint_every=10**12, eval_every=0)  # stopped by the clock
    envs = ppo.make_envs(config, int(config["n_envs"]))
    envs.reset(seed=0)
    envs.action_space.seed(0)
    pool = [envs.action_space.sample() for _ in range(ACTION_POOL)]
    env_rate = _rate(lambda i: envs.step(pool[i % ACTION_POOL]), envs.num_envs, seconds)
    envs.close()
    rates = {}
    for row, asynchronous in ((TRAINING_ROW, config.get("async_learner", False)), (TRAINING_SYNC_ROW, False)):
        with tempfile.TemporaryDirectory() as out:
            rates[row] = ppo.train({**config, "async_learner": asynchronous}, Path(out), max_minutes=seconds / 60,
                                   progress=False)["steps_per_s"]
    return [(TRAINING_ENV_ROW, env_rate, "env-steps/s"), *((row, rate, "env-steps/s") for row, rate in rates.items())]


def sandbox_rows(seconds: float) -> list[tuple[str, float, str]]:
    """The code sandbox: cold start of an id, calls/s and latency of 16 ids, in a bubblewrap
    jail, without one and as a subprocess per call (see :mod:`arena_envs.tools.sandbox_bench`)."""
    from arena_envs.tools.sandbox_bench import bench_rows

    return bench_rows(seconds)


def recording_rows(seconds: float) -> list[tuple[str, float, str]]:
    """Recorded episode sizes, and a vector env's steps/s with RecordEpisodes on and off."""
    from arena_envs.wrappers.record_bench import recording_rows as rows

    return rows(seconds, _rate)


def chat_rows(seconds: float) -> list[tuple[str, float, str]]:
    """Chat steps/s of 256 concurrent chat sessions via a local OpenAI-compatible server, and the
    environment's share of that time (see :mod:`arena_envs.llm.bench`)."""
    from arena_envs.llm.bench import chat_rows as rows

    return rows(seconds, sessions=256)


def _rounds_rate(round_: Callable[[int], None], units: int, seconds: float) -> float:
    """Units per second of the best round of ``round_(i)`` (each a new set of seeds), rounds run for
    ``seconds`` and at least two: a round is whole episodes, too long for :func:`_rate`'s windows."""
    best, i, deadline = 0.0, 0, time.perf_counter() + seconds
    while i < 2 or time.perf_counter() < deadline:
        start = time.perf_counter()
        round_(i)
        best, i = max(best, units / (time.perf_counter() - start)), i + 1
    return best


def door_rows(seconds: float, episodes: int = 32) -> list[tuple[str, float, str]]:
    """Episodes/s of the same seeded episodes, the scripted policy's calls one per reply, played
    through the chat sessions our runner and ``arena-train --algo grpo`` step together (a
    :class:`~arena_envs.llm.chat.ChatBatch`) and through TRL's door (:mod:`arena_envs.trl`: an
    instance per rollout, its tool methods called one rollout after another, as TRL's loop does)."""
    from arena_envs import trl
    from arena_envs.llm.chat import ChatBatch
    from arena_envs.llm.scripted import policy_for

    def call(messages: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        return policy_for(messages)(messages)[0]

    def reply(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}

    def batch_rate(env_id: str, kwargs: dict[str, Any]) -> float:
        batch = ChatBatch(env_id, episodes, **kwargs)

        def round_(i: int) -> None:
            batch.reset(i * episodes)
            while not all(s.done for s in batch.sessions):
                batch.step([None if s.done else reply(*call(s.messages)) for s in batch.sessions])

        try:
            return _rounds_rate(round_, episodes, seconds)
        finally:
            batch.close()

    def door_rate(env_id: str, kwargs: dict[str, Any]) -> float:
        instances = [trl.environment_class(env_id, **kwargs)() for _ in range(episodes)]

        def round_(i: int) -> None:
            for k, env in enumerate(instances):
                env.reset(seed=i * episodes + k)
            while not all(env.session.done for env in instances):
                for env in instances:  # TRL's tool loop: each rollout's calls in turn
                    if not env.session.done:
                        name, arguments = call(env.session.messages)
                        getattr(env, name)(**arguments)

        try:
            return _rounds_rate(round_, episodes, seconds)
        finally:
            for env in instances:
                env.__exit__()

    rows = []
    for label, env_id, kwargs in (("Treasure Hunt easy", "arena_envs/TreasureHunt-v0", {"difficulty": "easy"}),
                                  ("Foraging, 20 replies", "arena_envs/Foraging-v0",
                                   {"max_turns": 20, "wait_ticks": 50})):
        both = {**kwargs, "call_format": "hermes"}
        rows.append((f"Doors: {label}, {episodes} scripted episodes: chat sessions (arena-agent, arena-train)",
                     batch_rate(env_id, both), "episodes/s"))
        rows.append((f"Doors: {label}, {episodes} scripted episodes: TRL environment_factory",
                     door_rate(env_id, both), "episodes/s"))
        rows += verifiers_door_rows(f"Doors: {label}, {episodes} scripted episodes over HTTP", env_id, kwargs, episodes)
    return rows


VERIFIERS_PYTHON = Path(__file__).resolve().parents[1] / ".venv-verifiers" / "bin" / "python"


def verifiers_door_rows(label: str, env_id: str, kwargs: dict[str, Any],
                        episodes: int) -> list[tuple[str, float, str]]:
    """Episodes/s of the same seeded episodes against the scripted model's OpenAI server (its native
    tool calls, its validation off: both clients send what llama.cpp accepts; a process of its own, so
    that neither client shares a process with it), played by our runner (``run_episodes``, what
    ``arena-agent`` runs) and by verifiers' own evaluation of :mod:`arena_envs.verifiers` (in its venv,
    ``make verifiers``), all episodes at once in either."""
    import asyncio
    import os
    import subprocess

    from arena_envs.llm.agents import OpenAIChatAgent
    from arena_envs.llm.chat import ChatPool
    from arena_envs.llm.llama_server import free_port, wait_for_port
    from arena_envs.llm.runner import run_episodes

    if not VERIFIERS_PYTHON.exists():
        print("doors: the verifiers rows skipped (make verifiers builds its venv)", file=sys.stderr)
        return []
    options = {**kwargs, "call_format": "hermes", "text_calls": "user"}  # the verifiers door's defaults

    async def ours(base_url: str) -> float:
        agent = OpenAIChatAgent(base_url, "scripted")
        start = time.perf_counter()
        records = await run_episodes(ChatPool(env_id, episodes, **options), agent, range(episodes),
                                     concurrency=episodes)
        assert not any(r.error for r in records), [r.error for r in records if r.error][:1]
        return episodes / (time.perf_counter() - start)

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "arena_envs.llm.server", "--port", str(port), "--cache",
                               "--lenient"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_for_port(port, server)
        rate = asyncio.run(ours(base_url))
        code = ("import json, sys; from arena_envs.verifiers import episodes_per_second; "
                "print(episodes_per_second(**json.loads(sys.argv[1])))")
        arguments = {"base_url": base_url, "model": "scripted", "scenario": env_id, "episodes": episodes, **options}
        done = subprocess.run([str(VERIFIERS_PYTHON), "-c", code, json.dumps(arguments)], capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(VERIFIERS_PYTHON.parents[2])})
        if done.returncode:
            raise RuntimeError(f"the verifiers door failed: {done.stderr[-2000:]}")
    finally:
        server.terminate()
        server.wait(timeout=30)
    return [(f"{label}: our runner (arena-agent)", rate, "episodes/s"),
            (f"{label}: verifiers evaluate (vf-eval)", float(done.stdout.split()[-1]), "episodes/s")]


SECTIONS: dict[str, Callable[[float], list[tuple[str, float, str]]]] = {
    "foraging": foraging_rows,
    "crafting": crafting_rows,
    "tools": tool_call_rows,
    "tool_resets": tool_reset_rows,
    "stateful_tools": stateful_tool_rows,
    "treasure_hunt": treasure_hunt_rows,
    "chat": chat_rows,
    "team_capture": team_capture_rows,
    "sharded": sharded_rows,
    "training": training_rows,
    "reference": reference_rows,
    "serve": serve_rows,
    "sandbox": sandbox_rows,
    "recording": recording_rows,
    "serve_stall": serve_stall_rows,
    "doors": door_rows,
    "mcp": mcp_rows,
    "device": device_rows,
    "team_device": team_device_rows,
    "peers": peer_rows,
}

# (numerator row, denominator row) pairs reported as ratios when both were measured
RATIOS = (
    ("Foraging B=8192, num_workers=2", "Foraging B=8192, num_workers=1 (the native batch)"),
    ("Foraging B=8192, num_workers=2, copy=False", "Foraging B=8192, num_workers=1 (the native batch)"),
    ("Foraging B=8192, num_workers=2", "CartPole-v1 native vector env B=4096 (reference)"),
    (TRAINING_ROW, TRAINING_ENV_ROW),
    (TRAINING_ROW, TRAINING_SYNC_ROW),
    ("Foraging native batch B=4096", "Foraging SyncVectorEnv of 64 single envs"),
    ("Foraging native batch B=4096", "CartPole-v1 native vector env B=4096 (reference)"),
    ("Foraging native batch B=4096", "Foraging single env (gym.make)"),
    ("Crafting native batch B=4096", "CartPole-v1 native vector env B=4096 (reference)"),
    ("Team capture 4v4 vector_env B=4096", "CartPole-v1 native vector env B=4096 (reference)"),
    ("Team capture 4v4 vector_env B=4096", "Team capture 4v4 PettingZoo parallel_env"),
    ("Tool calls: ToolPool, 256 async sessions", "Tool calls: ToolCallWrapper loop over 256 single envs"),
    ("Tool resets: ToolPool, 256 ids at once", "Tool resets: ToolCallWrapper loop over 256 single envs"),
    ("Stateful tool (env_cls=Foraging), 256 ids", "Stateful tool baseline: loop over 256 single envs"),
    ("Serve foraging 256 sessions: arena-serve", "Serve foraging 256 sessions: stock OpenEnv server"),
    ("Serve foraging 256 sessions: OpenEnv server doing no work", "Serve foraging 256 sessions: stock OpenEnv server"),
    ("Serve foraging 256 sessions: arena-serve", "Serve foraging 256 sessions: OpenEnv server doing no work"),
    ("Serve foraging 256 sessions: arena-serve", "Serve foraging 256 sessions: stock server, envs stepped inline"),
    ("Sandbox calls, 16 ids: bwrap jail", "Sandbox calls, 16 ids: subprocess per call"),
    ("Sandbox calls, 16 ids: bwrap jail", "Sandbox calls, 16 ids: no jail"),
    # what the memory cgroup and seccomp cost a jailed call (issue 34: at most 20%)
    ("Sandbox calls, 16 ids: bwrap jail", "Sandbox calls, 16 ids: bwrap jail without memory cgroup and seccomp"),
    ("Sandbox cold start of an id: bwrap jail, p50", "Sandbox cold start of an id: subprocess per call, p50"),
    ("Foraging native batch B=64, RecordEpisodes on", "Foraging native batch B=64, RecordEpisodes off"),
    ("Doors: Treasure Hunt easy, 32 scripted episodes: TRL environment_factory",
     "Doors: Treasure Hunt easy, 32 scripted episodes: chat sessions (arena-agent, arena-train)"),
    ("Doors: Foraging, 20 replies, 32 scripted episodes: TRL environment_factory",
     "Doors: Foraging, 20 replies, 32 scripted episodes: chat sessions (arena-agent, arena-train)"),
    ("Doors: Treasure Hunt easy, 32 scripted episodes over HTTP: verifiers evaluate (vf-eval)",
     "Doors: Treasure Hunt easy, 32 scripted episodes over HTTP: our runner (arena-agent)"),
    ("Doors: Foraging, 20 replies, 32 scripted episodes over HTTP: verifiers evaluate (vf-eval)",
     "Doors: Foraging, 20 replies, 32 scripted episodes over HTTP: our runner (arena-agent)"),
    ("Treasure Hunt 64 oracle episodes, 8 at once: MCP door (arena-serve, OpenEnv MCPToolClient)",
     "Treasure Hunt 64 oracle episodes, 8 at once: our runner (run_episodes, ChatPool)"),
    # how much slower a bystander's step is beside four clients sending stall messages
    ("Serve foraging bystander beside 4 stall attackers p99", "Serve foraging bystander alone p99"),
    ("Serve foraging bystander beside 200 slowloris sockets from another address p99",
     "Serve foraging bystander alone p99"),
    # CPU per step: how many times more of it a step costs the stock server than arena-serve
    ("Serve foraging 256 sessions: stock OpenEnv server CPU", "Serve foraging 256 sessions: arena-serve CPU"),
)


def format_table(rows: list[tuple[str, float, str]]) -> str:
    width = max(len(r[0]) for r in rows)
    lines = [f"| {'row':<{width}} | {'rate':>14} | unit |", f"|{'-' * (width + 2)}|{'-' * 16}|{'-' * 15}|"]
    lines += [f"| {name:<{width}} | {rate:>14,.0f} | {unit} |" for name, rate, unit in rows]
    rates = {name: rate for name, rate, _ in rows}
    ratios = [(a, b) for a, b in RATIOS if a in rates and b in rates]
    if ratios:
        lines.append("")
        lines += [f"{a} / {b}: {rates[a] / rates[b]:,.3g}x" for a, b in ratios]
    return "\n".join(lines)


def section(name: str) -> str:
    """The section ``name`` names: a section's own name, or any spelling of a scenario that has one."""
    if name in SECTIONS:
        return name
    scenario = find(name)
    if scenario is not None and scenario.key in SECTIONS:
        return scenario.key
    raise UnknownNameError(unknown(name, "section", list(SECTIONS)))


def run(argv: list[str] | None = None) -> list[tuple[str, float, str]]:
    """Measure the sections named in ``argv``, print the table and return its rows."""
    parser = argparse.ArgumentParser(prog="arena-bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per row (default 2)")
    parser.add_argument("--only", nargs="*", metavar="SECTION",
                        help=f"sections to run (default all): {', '.join(SECTIONS)}; a scenario's section also "
                             "by any spelling of its name (Foraging-v0, team_capture_v0 ...)")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--against", metavar="REV",
                        help="also measure the sections on a git worktree of REV (a commit, HEAD~1...) in the same "
                             "run, in turns with this checkout, and give each row's ratio to REV's")
    parser.add_argument("--device", metavar="DEVICE",
                        help="measure the rules on torch tensors on DEVICE (cuda, cpu): the device section at "
                             f"B in {', '.join(map(str, DEVICE_SIZES))}, eager and compiled")
    parser.add_argument("--sizes", type=int, nargs="+", metavar="B", help="the device sections' batch sizes")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES),
                        help="the device sections' steps: eager, compiled (torch.compile; minutes to compile on a CPU)")
    args = parser.parse_args(argv)
    on_device = ("device", "team_device", "peers")
    for name, rows in (("device", device_rows), ("team_device", team_device_rows)):
        SECTIONS[name] = functools.partial(rows, device=args.device, sizes=tuple(args.sizes or DEVICE_SIZES),
                                           modes=tuple(args.modes))
    default = list(on_device) if args.device else [name for name in SECTIONS if name not in on_device]
    sections = list(dict.fromkeys(section(name) for name in args.only or default))  # each section once
    if args.against:
        rows, ratios = against(args.against, sections, args.seconds)
        print(format_table(rows) + "\n\n" + "\n".join(ratios), flush=True)
    else:
        rows = [row for name in sections for row in SECTIONS[name](args.seconds)]
        print(format_table(rows), flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)  # the docs' runs/bench.json, on a fresh checkout
        with open(args.json, "w") as fh:
            json.dump([{"row": n, "rate": r, "unit": u} for n, r, u in rows], fh, indent=2)
    return rows


def against(rev: str, sections: list[str], seconds: float,
            rounds: int = 2) -> tuple[list[tuple[str, float, str]], list[str]]:
    """``sections`` measured on this checkout and on a ``git worktree`` of ``rev``, each in a process of its
    own, taking turns ``rounds`` times (so that the machine's drifting load favours neither): each row's
    median over the rounds, this checkout's as ``ROW`` and ``rev``'s as ``ROW @rev``, and their ratios."""
    import os
    import statistics
    import subprocess
    import tempfile

    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="arena-bench-") as tmp:
        base = Path(tmp) / "base"
        made = subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(base), rev],
                              capture_output=True, text=True)
        if made.returncode:
            raise SystemExit(f"arena-bench: --against {rev}: {made.stderr.strip()}")
        measured: dict[str, list[tuple[str, float, str]]] = {}
        try:
            for _ in range(rounds):
                for label, tree in (("", root), (f" @{rev}", base)):
                    out = Path(tmp) / "rows.json"
                    subprocess.run([sys.executable, "-m", "arena_envs.bench", "--only", *sections, "--seconds",
                                    str(seconds), "--json", str(out)], env={**os.environ, "PYTHONPATH": str(tree)},
                                   check=True, stdout=subprocess.DEVNULL)
                    for row in json.loads(out.read_text()):
                        measured.setdefault(row["row"] + label, []).append((row["row"] + label, row["rate"],
                                                                            row["unit"]))
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(base)], capture_output=True)
    rows = [(name, statistics.median(rate for _, rate, _ in runs), runs[0][2]) for name, runs in measured.items()]
    rates = {name: rate for name, rate, _ in rows}
    ratios = [f"{name} / {name} @{rev}: {rate / rates[name + f' @{rev}']:,.3g}x" for name, rate, _ in rows
              if rates.get(name + f" @{rev}")]
    return rows, ratios


def main(argv: list[str] | None = None) -> int:
    """The ``arena-bench`` console script: exit status 0, or 2 with one line for a user's mistake."""
    return arena_bench(argv)


if __name__ == "__main__":
    sys.exit(main())
