"""Server sessions: OpenEnv ``Environment`` objects over one shared, batched core.

OpenEnv makes one ``Environment`` per session (per WebSocket connection) through a factory.
Here every such object is a thin handle on a :class:`SessionHub`, which owns the worlds:

* Foraging and Crafting: one :class:`~arena_envs.tools.ToolPool` (one native batch). Each
  session holds one world of it; ``step_async`` awaits ``pool.call``, so the sessions whose
  steps arrive together advance in one numpy step.
* Treasure Hunt: one ``TreasureHuntEnv`` per session. Its episode is Python objects (a
  tree of dicts and strings), not arrays, and its "vector env" is a loop over episodes, so
  batching would save nothing and would only make sessions wait for each other.
* Team Capture: one session drives a whole team (see :class:`~arena_envs.serve.team.TeamHub`).

:func:`~arena_envs.serve.hubs.make_hub` picks the hub for a scenario name.

A session is known to the hub by an unguessable token (``secrets.token_urlsafe``) that is
checked on every call; a handle whose token the hub no longer holds (closed, reclaimed)
can only get a clear error, never another session's world.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import functools
import secrets
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from arena_envs.names import resolve
from arena_envs.observations import Observation as ToolObservation
from arena_envs.tools import PoolExhaustedError, ToolCallError, ToolPool, tool_schemas
from arena_envs.tools.decision import is_plain_call
from arena_envs.tools.resource_pool import check_seed

from .mcp import SessionTools, as_mcp_tools, mcp_action, mcp_step
from .models import ArenaAction, ArenaObservation, ArenaState, observation_answer, step_answer
from .reading import MAX_MESSAGE_CHARS, READ_OFF_LOOP_CHARS, Reader, read_ahead, read_calls, text_size

SCENARIOS = {
    "foraging": "arena_envs/Foraging-v0",
    "crafting": "arena_envs/Crafting-v0",
    "treasure_hunt": "arena_envs/TreasureHunt-v0",
    "team_capture": "team_capture_v0",
}
"""Served scenarios by name (the name given to ``arena-serve``) and the env they serve."""

HTTP_WORLDS = 8
"""Worlds kept beyond the session cap for OpenEnv's stateless HTTP ``/reset`` (each request
makes, resets and closes a session of its own, outside the WebSocket session count)."""


class Tick(NamedTuple):
    """One call carried out: what the world answered, its reward, whether the episode ended,
    and the call's result as reported in ``info["parse"]["results"]``."""

    outcome: Any
    reward: float
    ended: bool
    result: Any


class SessionError(RuntimeError):
    """A call the session cannot carry out (no episode, episode over, reclaimed, shutting
    down, bad reset option): the client gets this message, the server carries on."""


def scenario_name(name: str) -> str:
    """The scenario key for any spelling of ``name`` (:mod:`arena_envs.names`): ``foraging``,
    ``Foraging-v0``, ``arena_envs/TeamCapture-v0``, ``team_capture_v0`` ..."""
    return resolve(name, among=list(SCENARIOS)).key


def _check_seed(seed: Any) -> int | None:
    try:
        return check_seed(seed)
    except ValueError as err:
        raise SessionError(str(err)) from None


class SessionHub(abc.ABC):
    """The worlds behind every session of one server, and the registry of live sessions.

    Subclasses make the worlds (:meth:`_open`, :meth:`_reset`, :meth:`_step`, :meth:`_free`).
    """

    scenario: str = ""
    description: str = ""

    def __init__(self, max_sessions: int, http_sessions: int = 0) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
        self.max_sessions = max_sessions
        # the WebSocket sessions' worlds, then those of sessions made over HTTP, then HTTP_WORLDS:
        # each kind has worlds of its own, so none can take another's (the guard counts them)
        self.worlds = max_sessions + http_sessions + HTTP_WORLDS
        self.sessions: dict[str, ArenaSession] = {}  # token -> the session holding a world
        self._lock = threading.Lock()  # handles are made and closed in OpenEnv's executor thread
        self._handles = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending_frees: set[asyncio.Task] = set()
        self.steps = 0
        self.reader = Reader()  # reads costly actions in a process of its own

    def factory(self) -> Callable[[], ArenaSession]:
        """The environment factory for OpenEnv's ``create_app``: a ``partial`` of the class, so
        OpenEnv reads the class's concurrency flags instead of making a throwaway instance."""
        return functools.partial(ArenaSession, hub=self)

    # -- called by sessions --------------------------------------------------------------

    def _made(self) -> None:
        with self._lock:
            self._handles += 1

    def _closed(self, session: ArenaSession) -> None:
        """A handle was closed (from any thread): free its world on the event loop."""
        with self._lock:
            self._handles -= 1
        loop = self._loop
        if loop is None or session.token not in self.sessions:
            return
        if _running_loop() is loop:
            self._schedule_free(session)
        else:
            loop.call_soon_threadsafe(self._schedule_free, session)

    def _schedule_free(self, session: ArenaSession) -> None:
        if session.busy:  # the call in flight frees it when it ends (see turn)
            return
        if self.sessions.get(session.token) is session:
            del self.sessions[session.token]
            task = asyncio.ensure_future(self._free(session))
            self._pending_frees.add(task)
            task.add_done_callback(self._pending_frees.discard)

    def _begin(self, session: ArenaSession, opening: bool = False) -> bool:
        """Check ``session``'s token and mark its call in flight; whether the session is new
        (its first reset, which only an ``opening`` call may make)."""
        self._loop = asyncio.get_running_loop()
        if session.closed:
            raise SessionError("this session was closed (idle for too long, or the connection ended); "
                               "open a new one")
        holder = self.sessions.get(session.token)
        if holder is not None and holder is not session:  # a token is one handle's, never shared
            raise SessionError("unknown session")
        new = holder is None
        if new:
            if not opening:
                raise SessionError("no episode in this session yet: call reset first")
            if len(self.sessions) >= self.worlds:
                raise SessionError(f"the server is full ({self.max_sessions} sessions); try again later "
                                   "(raise --max-sessions)")
            self.sessions[session.token] = session
        if session.busy:
            raise SessionError("this session already has a call in flight; wait for its answer")
        session.busy = True
        return new

    def _end(self, session: ArenaSession) -> None:
        """``session``'s call ended: a close that arrived meanwhile frees its world now."""
        session.busy = False
        if session.closed:
            self._schedule_free(session)

    @contextlib.asynccontextmanager
    async def turn(self, session: ArenaSession, opening: bool = False) -> AsyncIterator[None]:
        """One call of ``session``: its token is checked, and a close that arrives meanwhile
        waits for the call to end before the world is freed (``step_async`` writes it out)."""
        new = self._begin(session, opening)
        try:
            yield
        except BaseException:
            if new:  # its first reset failed: it keeps nothing (and may try again)
                session.busy = False
                self._schedule_free(session)
            raise
        finally:
            self._end(session)

    @functools.cached_property
    def mcp_tools(self) -> list[Any]:
        """The tools as MCP lists them (:mod:`.mcp`)."""
        return as_mcp_tools(self.tools)

    def stats(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "max_sessions": self.max_sessions, "handles": self._handles,
                "sessions": len(self.sessions), "steps": self.steps, "read_off_loop": self.reader.reads}

    async def aclose(self) -> None:
        """Wait for the worlds being freed (at shutdown)."""
        if self._pending_frees:
            await asyncio.gather(*self._pending_frees, return_exceptions=True)
        self.reader.shutdown()

    async def read(self, action: ArenaAction) -> tuple[list[Any], dict[str, Any] | None]:
        """:func:`read_calls` for ``action``: on the event loop when that is cheap, in the
        reader's process when ``action`` holds much text (see :mod:`.reading`)."""
        message, call = action.message, action.tool_call()
        size = text_size(message if message is not None else call)
        if size <= READ_OFF_LOOP_CHARS:
            return read_calls(message, call, self.tools)
        return await self._read_off_loop(size, read_calls, message, call, self.tools, True)

    async def read_team(self, calls: dict[str, Any]) -> dict[str, Any]:
        """A team's calls ({agent: call}), read off the loop when they hold much text (as :meth:`read`)."""
        size = sum(map(text_size, calls.values()))
        if size <= READ_OFF_LOOP_CHARS:
            return calls
        return dict(zip(calls, await self._read_off_loop(size, read_ahead, list(calls.values())), strict=True))

    async def _read_off_loop(self, size: int, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` in the reader's process, for an action holding ``size`` characters of text."""
        if size > MAX_MESSAGE_CHARS:
            raise SessionError(f"the action holds {size} characters of text, over the limit of {MAX_MESSAGE_CHARS}")
        try:
            return await self.reader.run(function, *args)
        except RuntimeError as err:
            raise SessionError(str(err)) from None

    # -- the worlds: what each kind of hub (pool, Treasure Hunt, team) does -----------------

    @abc.abstractmethod
    async def _reset(self, session: ArenaSession, seed: int | None, arrays: bool) -> ArenaObservation:
        """Start ``session``'s episode in its world (taking one for a new session)."""

    @abc.abstractmethod
    async def _step(self, session: ArenaSession, action: ArenaAction) -> ArenaObservation:
        """One action in ``session``'s world."""

    async def _play(self, action: ArenaAction, tick: Callable[[Any], Awaitable[Tick]]) -> tuple[Tick, float, Any]:
        """Carry out ``action``'s calls in order, one ``tick`` each, until the episode ends.

        Returns the last tick, the rewards summed over the ticks, and the parser's telemetry
        (None for a plain call object) with each call's result in ``results``.
        """
        calls, parse = await self.read(action)
        reward, results = 0.0, []
        for call in calls:
            last = await tick(call)
            self.steps += 1
            reward += last.reward
            results.append(last.result)
            if last.ended:
                break
        if parse is not None:
            parse["calls_run"] = len(results)
            parse["calls_not_run"] += len(calls) - len(results)
            parse["results"] = results
        return last, reward, parse

    @abc.abstractmethod
    async def _free(self, session: ArenaSession) -> None:
        """Give ``session``'s world back."""


class Rendered(NamedTuple):
    """What a :class:`PoolHub`'s pool gives for each call instead of its Observation."""

    text: str
    data: dict[str, Any]  # Observation.to_dict, sharing the Observation's containers
    result: Any  # the ActionResult of the call, None when there is none


def render(observation: ToolObservation) -> Rendered:
    """A step's observation as a server sends it, made inside the pool's batched step (its
    ``render``): there, right after the observation is built, it measured 7-15 us a step
    against 21-25 us in the caller, once the batch's observations had gone cold."""
    return Rendered(observation.to_text(), observation.to_dict(copy=False), observation.last_action_result)


class PoolHub(SessionHub):
    """Foraging or Crafting: every session is one world of one :class:`ToolPool`."""

    def __init__(self, scenario: str, max_sessions: int, timeout: float = 5.0, http_sessions: int = 0,
                 **env_kwargs: Any) -> None:
        super().__init__(max_sessions, http_sessions)
        self.scenario = scenario
        self.pool = ToolPool(SCENARIOS[scenario], size=self.worlds, timeout=timeout, render=render, **env_kwargs)
        self.params = self.pool.scenario.params
        self.tools = tool_schemas(params=self.params)
        self.description = (f"Agent Arena {scenario.replace('_', ' ').title()} through tool calls; "
                            f"{max_sessions} sessions share one batched numpy core")

    async def _reset(self, session: ArenaSession, seed: int | None, arrays: bool) -> ArenaObservation:
        try:
            obs = await self.pool.acquire(session.token, seed=seed)  # an Observation: acquire does not render
        except PoolExhaustedError as err:
            raise SessionError(f"the server is full: {err} (raise --max-sessions)") from None
        session.world = self.pool.monitor()["ids"][session.token] if arrays else None
        return self._answer(session, render(obs), 0.0, False, False, {}, first=True)

    async def _step(self, session: ArenaSession, action: ArenaAction) -> ArenaObservation:
        call = action.tool_call()
        if action.message is None and is_plain_call(call):  # the usual case: _play's work without
            # its closure, Tick and unused result dict (a few us of every step)
            step = await self._call(session, call)
            self.steps += 1
            return self._answer(session, step.observation, step.reward, step.terminated, step.truncated,
                                step.info)

        async def tick(call: Any) -> Tick:
            step = await self._call(session, call)
            result = step.observation.result
            return Tick(step, step.reward, step.terminated or step.truncated,
                        None if result is None else result.to_dict())

        last, reward, parse = await self._play(action, tick)
        step = last.outcome
        info = step.info if parse is None else {**step.info, "parse": parse}
        return self._answer(session, step.observation, reward, step.terminated, step.truncated, info)

    async def _call(self, session: ArenaSession, call: Any) -> Any:
        """One tool call in ``session``'s world; one the tool layer cannot read is the client's error."""
        try:
            return await self.pool.call(call, id=session.token)
        except ToolCallError as err:
            raise SessionError(str(err)) from None

    def _answer(self, session: ArenaSession, rendered: Rendered, reward: float, terminated: bool,
                truncated: bool, info: dict[str, Any], first: bool = False) -> ArenaObservation:
        arrays = None
        if session.world is not None:  # one world's arrays: a copy of its rows, observed alone
            part = self.pool.state.take(np.array([session.world]))
            arrays = {key: value[0].tolist() for key, value in self.pool.scenario.observe(part).items()}
        if arrays is None and not first:  # a step's answer, the hot path: no validation (see step_answer)
            return step_answer(rendered.text, rendered.data, reward, terminated, truncated, info)
        return observation_answer(rendered.text, rendered.data, self.tools, first=first, reward=reward,
                                  terminated=terminated, truncated=truncated, info=info, arrays=arrays)

    async def _free(self, session: ArenaSession) -> None:
        await self.pool.release(session.token)

    def stats(self) -> dict[str, Any]:
        worlds = self.pool.monitor()
        return {**super().stats(), "worlds": worlds["size"], "free_worlds": worlds["free"]}


class TreasureHuntHub(SessionHub):
    """Treasure Hunt: one ``TreasureHuntEnv`` per session (see the module docstring for why)."""

    scenario = "treasure_hunt"

    def __init__(self, max_sessions: int, http_sessions: int = 0, **env_kwargs: Any) -> None:
        from arena_envs.treasure_hunt import TREASURE_HUNT_TOOL_SCHEMAS

        super().__init__(max_sessions, http_sessions)
        gym.make(SCENARIOS["treasure_hunt"], **env_kwargs).close()  # bad arguments fail now, not per session
        self.env_kwargs = env_kwargs
        self.tools = list(TREASURE_HUNT_TOOL_SCHEMAS)
        self.envs: dict[str, gym.Env] = {}
        self.description = "Treasure Hunt: follow clue files to a key with text tools (pwd, cd, ls, cat, ...)"

    async def _reset(self, session: ArenaSession, seed: int | None, arrays: bool) -> ArenaObservation:
        if arrays:
            raise SessionError("Treasure Hunt observations are text: it has no arrays")
        env = self.envs.get(session.token)
        if env is None:
            env = self.envs[session.token] = gym.make(SCENARIOS["treasure_hunt"], **self.env_kwargs)
        text, info = env.reset(seed=seed)
        return self._observation(text, None, False, False, info, first=True)

    async def _step(self, session: ArenaSession, action: ArenaAction) -> ArenaObservation:
        env = self.envs[session.token]

        async def tick(call: Any) -> Tick:
            outcome = env.step(call)
            return Tick(outcome, outcome[1], outcome[2] or outcome[3], {"output": outcome[0]})

        last, reward, parse = await self._play(action, tick)
        text, _, terminated, truncated, info = last.outcome
        if parse is not None:
            info = {**info, "parse": parse}
        return self._observation(text, reward, terminated, truncated, info)

    def _observation(self, text: str, reward: float | None, terminated: bool, truncated: bool,
                     info: dict[str, Any], first: bool = False) -> ArenaObservation:
        return observation_answer(text, {"text": text}, self.tools, first=first, reward=reward,
                                  terminated=terminated, truncated=truncated, info=info)

    async def _free(self, session: ArenaSession) -> None:
        env = self.envs.pop(session.token, None)
        if env is not None:
            env.close()


class ArenaSession(Environment[ArenaAction, ArenaObservation, ArenaState]):
    """One OpenEnv session: a handle on one world of the hub's batch.

    OpenEnv builds one per WebSocket connection (and one per stateless HTTP request) and
    calls ``close`` when the connection ends or the session is reclaimed, which frees the world.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True
    # a handle is only a token: one shared thread is enough to make and close them (OpenEnv
    # would otherwise start a thread per session)
    REQUIRES_SINGLE_THREAD_EXECUTOR = True

    def __init__(self, hub: SessionHub) -> None:
        super().__init__()
        self.hub = hub
        self.token = secrets.token_urlsafe(24)
        self.world: int | None = None
        self.busy = False
        self.closed = False
        # the episode's state as plain attributes: ``state`` builds OpenEnv's model when asked
        # (pydantic's checked assignments on every step cost more than the batched numpy step)
        self.episode_id: str | None = None
        self.seed: int | None = None
        self.step_count = 0
        self.done = False
        hub._made()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> ArenaObservation:
        raise SessionError("this environment is asynchronous: use reset_async")

    def step(self, action: ArenaAction, timeout_s: float | None = None, **kwargs: Any) -> ArenaObservation:
        raise SessionError("this environment is asynchronous: use step_async")

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None, arrays: bool = False,
                          **kwargs: Any) -> ArenaObservation:
        """Start an episode in this session's world (``seed`` as for the Gymnasium env;
        ``arrays=True`` adds the native observation arrays to every observation)."""
        kwargs.pop("timeout_s", None)
        if kwargs:
            raise SessionError(f"unknown reset option(s): {', '.join(sorted(kwargs))}; "
                               "expected seed, episode_id, arrays")
        seed = _check_seed(seed)
        if not isinstance(arrays, bool):
            raise SessionError(f"arrays must be true or false, got {arrays!r}")
        if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > 255):
            raise SessionError("episode_id must be a string of at most 255 characters")
        async with self.hub.turn(self, opening=True):
            observation = await self.hub._reset(self, seed, arrays)
        self.episode_id, self.seed, self.step_count, self.done = episode_id or uuid.uuid4().hex, seed, 0, False
        return observation

    async def step_async(self, action: ArenaAction, timeout_s: float | None = None,
                         **kwargs: Any) -> ArenaObservation:
        """Carry out one tool call (a bad call costs a tick and comes back as a failed result)."""
        if type(action) is not ArenaAction or action.tool is None:  # (one test on the hot path: a plain call)
            try:
                mcp = mcp_action(action)  # OpenEnv's ListToolsAction / CallToolAction (serve/mcp.py)
            except ValueError as err:
                raise SessionError(str(err)) from None
            if mcp is not None:
                return await mcp_step(self, mcp)
            if not isinstance(action, ArenaAction):
                raise SessionError(f"expected a tool call, got {type(action).__name__}")
        # hub.turn written out (a step never opens a session): the context manager's generator
        # and its two awaits cost about 3 us of every step
        hub = self.hub
        hub._begin(self)
        try:
            if self.done:
                raise SessionError("the episode is over: reset to start another")
            observation = await hub._step(self, action)
        finally:
            hub._end(self)
        self.step_count += 1
        self.done = observation.done
        return observation

    @property
    def mcp_client(self) -> SessionTools:
        """What OpenEnv's server calls for ``POST /mcp`` ``tools/list`` and ``tools/call`` (:mod:`.mcp`)."""
        return SessionTools(self)

    @property
    def state(self) -> ArenaState:
        return ArenaState(episode_id=self.episode_id, step_count=self.step_count, scenario=self.hub.scenario,
                          seed=self.seed, done=self.done)

    def get_metadata(self) -> EnvironmentMetadata:
        from arena_envs import __version__

        return EnvironmentMetadata(name=f"arena_envs/{self.hub.scenario}", description=self.hub.description,
                                   version=__version__, author="arena-envs")

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.hub._closed(self)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
