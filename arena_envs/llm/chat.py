"""Chat environments: every scenario spoken to in OpenAI chat messages.

    from arena_envs.llm import ChatEnv

    env = ChatEnv("arena_envs/TreasureHunt-v0")
    messages, tools = env.reset(seed=0)               # [system, user] + OpenAI tool schemas
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "cat", "arguments": '{"file": "start.txt"}'}}]}
    new_messages, reward, terminated, truncated, info = env.step(reply)   # [tool, user]
    env.messages                                      # the whole transcript, which only ever grows

Many sessions share one engine: ``ChatPool(env_id, size)`` hands out :class:`ChatSession`
objects whose ``await session.step(reply)`` calls coalesce into one batched numpy step (the
2D scenarios run on a :class:`~arena_envs.tools.ToolPool`); ``ChatBatch`` steps a list of
sessions together from synchronous code.

| reply                       | what happens                                                          |
|-----------------------------|-----------------------------------------------------------------------|
| with calls                  | each call (at most ``max_calls``) runs as one tick, in order; one     |
|                             | `tool` message per call (its `tool_call_id`), then a `user` message   |
|                             | with the next observation                                             |
| without a call              | one tick with the current action carrying on (``on_no_call=           |
|                             | "continue"``) or the episode ends (``"end"``); a parse failure either way |
| an unreadable/invalid call  | its tool message is an error (`INVALID_PARAMS`...) naming why; play goes on |
| ``wait_ticks=n``            | then up to n more ticks while the agent walks or crafts (2D)          |
| ``max_turns``               | replies before truncation (None: only the scenario's own limit)       |

The assistant reply may be an OpenAI message dict (``tool_calls`` with JSON-string
arguments), an SDK message object, or text in any format :func:`parse_reply` reads. It is
appended to the transcript as given; calls read from text get the ids ``call_<turn>_<k>``.
``info`` reports per turn the format detected, calls parsed, calls invalid and why, and the
scenario's own info (``success``, ``score``...).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from arena_envs.llm.parsers import ParsedCall, parse_reply
from arena_envs.llm.prompts import system_prompt
from arena_envs.names import resolve
from arena_envs.tools import ToolCallError

TREASURE_HUNT = "arena_envs/TreasureHunt-v0"
NOT_RUN = "NOT_RUN"
"""Error code of a call that was not carried out (over the per-reply limit, or the episode had ended)."""


class ChatStep(NamedTuple):
    messages: list[dict[str, Any]]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


@dataclasses.dataclass(slots=True)
class Tick:
    """What one tick of a backend gives back."""

    result: str  # the content of the call's tool message
    observation: str | Callable[[], str]  # the observation after the tick as text (or how to render it,
    # since only the last tick of a turn is shown)
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    error_code: str | None = None  # the call's error code; None: it succeeded (or there was no call)
    position: tuple[float, float, float] | None = None  # where the agent stands (2D scenarios)
    busy: bool = False  # a craft in progress: waiting is worthwhile even standing still


class Backend(Protocol):
    """The world behind one chat session."""

    scenario: str
    tools: list[dict[str, Any]]

    def system_prompt(self, max_calls: int, end_without_call: bool) -> str: ...

    async def reset(self, seed: int | None) -> tuple[str, dict[str, Any]]: ...

    async def tick(self, call: dict[str, Any] | None) -> Tick: ...

    async def close(self) -> None: ...


class ChatSession:
    """One agent's episode as a conversation; see the module docstring."""

    def __init__(self, backend: Backend, *, max_calls: int = 8, on_no_call: str = "continue",
                 wait_ticks: int = 0, max_turns: int | None = None):
        if on_no_call not in ("continue", "end"):
            raise ValueError(f"on_no_call must be 'continue' or 'end', got {on_no_call!r}")
        if max_calls < 1:
            raise ValueError(f"max_calls must be at least 1, got {max_calls}")
        if wait_ticks < 0:
            raise ValueError(f"wait_ticks must be >= 0, got {wait_ticks}")
        self.backend = backend
        self.max_calls, self.on_no_call, self.wait_ticks, self.max_turns = max_calls, on_no_call, wait_ticks, max_turns
        self.tools = backend.tools
        self.messages: list[dict[str, Any]] = []
        self.turn = 0
        self.ticks = 0
        self.episode_return = 0.0
        self.done = True
        self.last_info: dict[str, Any] = {}
        self._position: tuple[float, float, float] | None = None  # to tell whether the agent walks on
        self._moved = False

    @property
    def scenario(self) -> str:
        return self.backend.scenario

    async def reset(self, seed: int | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Start an episode: the opening messages (system, user) and the OpenAI tool schemas."""
        observation, info = await self.backend.reset(seed)
        system = self.backend.system_prompt(self.max_calls, self.on_no_call == "end")
        self.messages = [{"role": "system", "content": system}, {"role": "user", "content": observation}]
        self.turn = self.ticks = 0
        self.episode_return = 0.0
        self.done = False
        self.last_info = dict(info)
        self._position, self._moved = getattr(self.backend, "start_position", None), False
        return _copies(self.messages), [dict(tool) for tool in self.tools]

    async def step(self, reply: Any) -> ChatStep:
        """Play one assistant reply: its calls as ticks, then the next observation."""
        if self.done:
            raise RuntimeError("the episode is over (or never began): call reset() first")
        message = assistant_message(reply)  # a bad reply raises here, before anything changed
        try:
            return await self._play(message)
        except BaseException:
            self.done = True  # the world failed mid-turn: the transcript cannot go on consistently
            raise

    async def _play(self, message: dict[str, Any]) -> ChatStep:
        self.turn += 1
        for k, entry in enumerate(message.get("tool_calls") or ()):
            if isinstance(entry, dict) and not (isinstance(entry.get("id"), str) and entry["id"]):
                entry["id"] = f"call_{self.turn}_{k}"  # some servers send none: a resent transcript needs them
        self.messages.append(message)
        parsed = parse_reply(message, self.tools)
        new: list[dict[str, Any]] = []
        reward, terminated, truncated, info = 0.0, False, False, self.last_info
        invalid: list[dict[str, Any]] = []
        ticks = 0

        for k, call in enumerate(parsed.calls):
            call_id = call.id or f"call_{self.turn}_{k}"
            if terminated or truncated or k >= self.max_calls:
                why = "the episode had ended" if terminated or truncated else \
                    f"at most {self.max_calls} calls run per reply"
                new.append(_tool_message(call_id, _error(NOT_RUN, f"not run: {why}")))
                invalid.append({"name": call.name, "code": NOT_RUN, "why": why})
                continue
            tick = await self._tick(call.as_call() if call.ok else None)
            ticks += 1
            reward += tick.reward
            terminated, truncated, info = tick.terminated, tick.truncated, tick.info
            if not call.ok:
                code, result = "INVALID_PARAMS", _error("INVALID_PARAMS", _unreadable(call))
            else:
                code, result = tick.error_code, tick.result
            if code is not None:
                invalid.append({"name": call.name, "code": code, "why": _why(call, result)})
            new.append(_tool_message(call_id, result))
            observation = tick.observation

        note = ""
        ended_by = None
        if parsed.failure:
            if self.on_no_call == "end":
                truncated, ended_by = True, "no_tool_call"
                observation = ""
                note = f"No tool call found ({parsed.error}); the episode ends."
            else:
                tick = await self._tick(None)
                ticks += 1
                reward += tick.reward
                terminated, truncated, info = tick.terminated, tick.truncated, tick.info
                observation = tick.observation
                note = f"No tool call found ({parsed.error}); the world ran one tick with your action carrying on."

        # let a walking agent arrive (a crafting one finish) before asking again
        waited = 0
        while waited < self.wait_ticks and self._moved and not (terminated or truncated):
            tick = await self._tick(None)
            ticks += 1
            waited += 1
            reward += tick.reward
            terminated, truncated, info = tick.terminated, tick.truncated, tick.info
            observation = tick.observation

        if not (terminated or truncated) and self.max_turns is not None and self.turn >= self.max_turns:
            truncated, ended_by = True, "max_turns"
        if callable(observation):
            observation = observation()
        user = "\n".join(part for part in (note, observation) if part)
        if user:
            new.append({"role": "user", "content": user})
        self.messages += new
        self.ticks += ticks
        self.episode_return += reward
        self.done = terminated or truncated
        self.last_info = info
        step_info = {**info, **parsed.telemetry(), "turn": self.turn, "ticks": ticks,
                     "calls_invalid": len(invalid), "invalid": invalid, "ended_by": ended_by}
        return ChatStep(_copies(new), float(reward), bool(terminated), bool(truncated), step_info)

    async def _tick(self, call: dict[str, Any] | None) -> Tick:
        tick = await self.backend.tick(call)
        self._moved = tick.busy or (tick.position is not None and tick.position != self._position)
        self._position = tick.position
        return tick

    async def close(self) -> None:
        """Give the session's world back (a pooled world is reset and freed)."""
        self.done = True
        await self.backend.close()


def assistant_message(reply: Any) -> dict[str, Any]:
    """An assistant reply as a plain OpenAI message dict (text becomes ``content``)."""
    if callable(getattr(reply, "model_dump", None)):
        reply = reply.model_dump(exclude_none=True)
    if isinstance(reply, (bytes, bytearray)):
        reply = bytes(reply).decode("utf-8", errors="replace")
    if isinstance(reply, str):
        return {"role": "assistant", "content": reply}
    if not isinstance(reply, dict):
        raise ValueError(f"an assistant reply must be a message dict or text, got {type(reply).__name__}")
    role = reply.get("role", "assistant")
    if role != "assistant":
        raise ValueError(f"the reply must be an assistant message, got role {role!r}")
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    for key in ("tool_calls", "reasoning_content", "name"):
        if reply.get(key) is not None:
            message[key] = json.loads(json.dumps(reply[key], default=str))  # a plain, independent copy
    if message.get("tool_calls") == []:
        del message["tool_calls"]
    return message


def _tool_message(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _error(code: str, message: str) -> str:
    return json.dumps({"success": False, "error_code": code, "error_message": message})


def _unreadable(call: ParsedCall) -> str:
    name = f"call of {call.name!r}" if call.name else "tool call"
    return f"{name} could not be read: {call.error}"


def _why(call: ParsedCall, result: str) -> str:
    try:
        data = json.loads(result)
    except ValueError:
        return result[:200]
    return str(data.get("error_message") or data.get("error") or result)[:200] if isinstance(data, dict) \
        else result[:200]


def _copies(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies for the caller: changing them never changes the transcript."""
    return [dict(message) for message in messages]


# -- backends ---------------------------------------------------------------------------


def scenario_name(env_id: str) -> str:
    """Any spelling of a scenario (``"arena_envs/Foraging-v0"``, ``"foraging"``) -> ``"Foraging"``."""
    return resolve(env_id).title


class PoolBackend:
    """One id of a shared :class:`~arena_envs.tools.ToolPool`: a 2D scenario, batched with the others."""

    def __init__(self, pool, id: Any):
        self.pool, self.id = pool, id
        self.scenario = scenario_name(pool.env_id)
        self.params = pool.scenario.params
        self.tools = universal_schemas(self.params)
        self.start_position: tuple[float, float, float] | None = None

    def system_prompt(self, max_calls: int, end_without_call: bool) -> str:
        p = self.params
        facts = {"half": p.half_size, "ticks": p.max_ticks, "speed": p.move_speed, "collect": p.collect_range,
                 "craft": p.craft_range, "sight": p.perception_radius, "goal": getattr(p, "goal", ""),
                 "recipes": recipes_text(getattr(p, "recipes", ()))}
        return system_prompt(self.scenario, max_calls, end_without_call, **facts)

    async def reset(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        observation = await self.pool.acquire(self.id, seed=seed)
        self.start_position = observation.position
        return observation_text(observation), dict(observation.custom)

    async def tick(self, call: dict[str, Any] | None) -> Tick:
        step = await self.pool.call(call, id=self.id)
        obs = step.observation
        info = {**step.info, **{k: v for k, v in obs.custom.items() if k in ("success", "score")}}
        busy = bool(obs.custom.get("crafting"))
        if call is None:  # carrying on: no tool message, and the text only if this tick is shown
            return Tick("", lambda: observation_text(obs), step.reward, step.terminated, step.truncated, info,
                        None, obs.position, busy)
        result = obs.last_action_result
        data: dict[str, Any] = {"tool": result.tool if result else None,
                                "success": bool(result and result.success)}
        if result is not None and not result.success:
            data["error_code"], data["error_message"] = result.error_code, result.error_message
        if obs.query_result is not None:
            data["query_result"] = obs.query_result
        if obs.inventory_details is not None:
            data["inventory_details"] = obs.inventory_details
        code = None if result is not None and result.success else \
            (result.error_code if result is not None else "INVALID_PARAMS")
        return Tick(json.dumps(_rounded(data)), lambda: observation_text(obs), step.reward, step.terminated,
                    step.truncated, info, code, obs.position, busy)

    async def close(self) -> None:
        await self.pool.release(self.id)


def recipes_text(recipes) -> str:
    """``iron_ingot: 1 iron_ore + 1 coal @ furnace (30 ticks); ...`` for a system message."""
    return "; ".join(f"{r.output}: " + " + ".join(f"{n} {item}" for item, n in r.inputs.items())
                     + f" @ {r.station} ({r.ticks} ticks)" + (f", makes {r.count}" if r.count != 1 else "")
                     for r in recipes)


def observation_text(observation) -> str:
    """The observation for the user message: results (and query answers) go in tool messages, so
    they are left out here."""
    return dataclasses.replace(observation, last_action_result=None, query_result=None,
                               inventory_details=None).to_text()


def _rounded(value: Any) -> Any:
    """Floats to 2 decimals, all the way down: positions to the centimetre are plenty, and tokens cost."""
    if isinstance(value, float):
        return round(value, 2)
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(item) for item in value]
    return value


def universal_schemas(params) -> list[dict[str, Any]]:
    """The seven universal tools' schemas, with the bounds of a world of ``params`` when the registry can."""
    from arena_envs.tools import registry

    if hasattr(registry, "universal_tools"):
        return registry.universal_tools(params).schemas()
    return registry.tool_schemas()


class HuntBackend:
    """One Treasure Hunt, played through its Gymnasium env (text in, text out)."""

    scenario = "TreasureHunt"

    def __init__(self, **env_kwargs: Any):
        from arena_envs.treasure_hunt import HUNT_TOOLS, TREASURE_HUNT_TOOL_SCHEMAS, TreasureHuntEnv

        self.env = TreasureHuntEnv(**env_kwargs)
        self.registry = HUNT_TOOLS
        self.tools = TREASURE_HUNT_TOOL_SCHEMAS

    def system_prompt(self, max_calls: int, end_without_call: bool) -> str:
        return system_prompt(self.scenario, max_calls, end_without_call, turns=self.env.max_steps)

    async def reset(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed)
        return observation, info

    async def tick(self, call: dict[str, Any] | None) -> Tick:
        # no call still costs a turn, so a model that never calls cannot play forever
        observation, reward, terminated, truncated, info = self.env.step(call if call is not None else "")
        body, _, status = observation.rpartition("\n")
        code = None
        if call is not None and body.startswith("Error:"):
            # a call the tool declarations refuse is INVALID_PARAMS; a valid one that failed
            # (no such file, wrong key) is the hunt's own error
            code = "TOOL_ERROR"
            try:
                self.registry.validate(call["tool"], call["params"])
            except ToolCallError:
                code = "INVALID_PARAMS"
                body = "Error: INVALID_PARAMS: " + body.removeprefix("Error:").strip()
        info = {**info, "score": float(info.get("efficiency", 0.0)) * 100}
        return Tick(body, status, reward, terminated, truncated, info, code)

    async def close(self) -> None:
        self.env.close()


# -- many sessions ----------------------------------------------------------------------


class ChatPool:
    """Chat sessions of one scenario sharing one engine.

    For the 2D scenarios the sessions are ids of a :class:`~arena_envs.tools.ToolPool` of
    ``size`` worlds: concurrent ``step`` calls advance in one batched numpy step. Treasure
    Hunt sessions each play their own text env (there is nothing to batch).
    """

    def __init__(self, env_id: str, size: int = 64, *, timeout: float = 30.0, max_calls: int = 8,
                 on_no_call: str = "continue", wait_ticks: int = 0, max_turns: int | None = None,
                 **env_kwargs: Any):
        env_id = resolve(env_id).env_id  # any spelling of the name
        self.env_id, self.size, self.env_kwargs = env_id, size, env_kwargs
        self.options = {"max_calls": max_calls, "on_no_call": on_no_call, "wait_ticks": wait_ticks,
                        "max_turns": max_turns}
        self.scenario = scenario_name(env_id)
        if self.scenario == "TeamCapture":
            raise ValueError("Team Capture has several agents: play it with arena_envs.llm.team.TeamChat")
        self.tool_pool = None
        if env_id != TREASURE_HUNT:
            from arena_envs.tools import ToolPool

            self.tool_pool = ToolPool(env_id, size=size, timeout=timeout, **env_kwargs)
        self._count = 0

    def session(self) -> ChatSession:
        """A new session (it takes a world at its first ``reset`` and frees it at ``close``)."""
        self._count += 1
        if self.tool_pool is None:
            backend: Backend = HuntBackend(**self.env_kwargs)
        else:
            backend = PoolBackend(self.tool_pool, id=f"chat-{self._count}")
        return ChatSession(backend, **self.options)


class ChatBatch:
    """``size`` sessions stepped together from synchronous code (one event loop of its own).

        batch = ChatBatch("arena_envs/Foraging-v0", size=32)
        openings = batch.reset(seed=0)                       # session i gets seed 0 + i
        steps = batch.step([reply_0, ..., reply_31])         # None: that session sits this step out
    """

    def __init__(self, env_id: str, size: int = 1, **options: Any):
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(asyncio.sleep(0))  # pools made inside bind to this loop
        self.pool = self._run(_make_pool(env_id, size, options))
        self.sessions = [self.pool.session() for _ in range(size)]

    def reset(self, seed: int | Sequence[int | None] | None = None):
        """Reset every session: ``seed`` None, an int (session i gets seed + i) or one per session."""
        if seed is None or isinstance(seed, int):
            seeds = [None if seed is None else seed + i for i in range(len(self.sessions))]
        else:
            seeds = list(seed)
            if len(seeds) != len(self.sessions):
                raise ValueError(f"expected {len(self.sessions)} seeds, got {len(seeds)}")
        return self._run(_gather(*(s.reset(x) for s, x in zip(self.sessions, seeds, strict=True))))

    def step(self, replies: Sequence[Any]) -> list[ChatStep | None]:
        """One reply per session, stepped together; a session given None (or already done) returns None."""
        if len(replies) != len(self.sessions):
            raise ValueError(f"expected {len(self.sessions)} replies, got {len(replies)}")

        async def one(session: ChatSession, reply: Any) -> ChatStep | None:
            return None if reply is None or session.done else await session.step(reply)

        return self._run(_gather(*(one(s, r) for s, r in zip(self.sessions, replies, strict=True))))

    def close(self) -> None:
        if not self._loop.is_closed():
            self._run(_gather(*(s.close() for s in self.sessions)))
            self._loop.close()

    def _run(self, awaitable):
        return self._loop.run_until_complete(awaitable)


async def _gather(*awaitables):
    return await asyncio.gather(*awaitables)


async def _make_pool(env_id: str, size: int, options: dict[str, Any]) -> ChatPool:
    return ChatPool(env_id, size, **options)


class ChatEnv:
    """One chat session from synchronous code: ``reset(seed)`` and ``step(reply)`` like a Gymnasium env.

    Inside a running event loop (a notebook), use the async :class:`ChatSession` from
    :class:`ChatPool` instead.
    """

    def __init__(self, env_id: str, **options: Any):
        self._batch = ChatBatch(env_id, 1, **options)
        self.session = self._batch.sessions[0]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.session.messages

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.session.tools

    def reset(self, seed: int | None = None):
        return self._batch.reset([seed])[0]

    def step(self, reply: Any) -> ChatStep:
        return self._batch._run(self.session.step(reply))

    def close(self) -> None:
        self._batch.close()
