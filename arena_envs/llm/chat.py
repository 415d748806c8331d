"""Chat environments: every scenario spoken to in OpenAI chat messages.

    from arena_envs.llm import ChatEnv

    env = ChatEnv("arena_envs/TreasureHunt-v0")
    messages, tools = env.reset(seed=0)               # [system, user] + OpenAI tool schemas
    reply = {"role": "assistant", "content": "", "tool_calls": [
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
arguments), an SDK message object, or text in any format :func:`parse_reply` reads. The
transcript is a valid OpenAI chat sequence by construction (checked by
:func:`~arena_envs.llm.transcripts.validate_messages`; see docs/guide/llm-transcripts.md):
the reply is stored as a copy with string content (``null_content=True``: ``None`` beside
``tool_calls``); calls read from text are declared as its ``tool_calls`` (ids
``call_<turn>_<k>``) beside the raw text, or with ``text_calls="user"`` answered in the user
message; every declared id gets exactly one tool message; entries that are not calls and
calls that cannot be read are answered in the user message. ``info`` reports per turn the
format detected, the parse status (``call``, ``none``, ``near_miss``, ``unreadable``,
``quoted_example``, ``wrong_format``), calls parsed, calls invalid and why, and the
scenario's own info (``success``, ``score``...).

Options (:class:`ChatOptions`, keywords of every chat class): ``max_calls``, ``on_no_call``,
``wait_ticks``, ``max_turns``, ``call_format`` (the syntax the prompt teaches),
``strict_parse``, ``text_calls``, ``null_content``, ``tools_in_prompt``, ``no_call_penalty``
(a reward cost for a turn without a readable call).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from arena_envs.llm.backends import (
    Backend,
    HuntBackend,
    PoolBackend,
    RemoteHuntBackend,
    Tick,
    scenario_name,
)
from arena_envs.llm.parsers import FORMATS, MAX_CALLS, ParsedCall, ParseResult, parse_reply
from arena_envs.llm.prompts import no_call_note, system_prompt
from arena_envs.names import resolve
from arena_envs.tools.resource_pool import Workers

TREASURE_HUNT = "arena_envs/TreasureHunt-v0"
NOT_RUN = "NOT_RUN"
"""Error code of a call that was not carried out (over the per-reply limit, or the episode had ended)."""


class ChatStep(NamedTuple):
    messages: list[dict[str, Any]]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


TEXT_CALLS = ("tool_calls", "user")


@dataclasses.dataclass(frozen=True, slots=True)
class ChatOptions:
    """How a chat session plays; every option is a keyword of ChatSession, ChatPool, ChatBatch, ChatEnv
    and TeamChat (see the module docstring)."""

    max_calls: int = 8
    on_no_call: str = "continue"
    wait_ticks: int = 0
    max_turns: int | None = None
    call_format: str = "openai"
    strict_parse: bool = False
    text_calls: str = "tool_calls"
    null_content: bool = False
    tools_in_prompt: bool = False
    no_call_penalty: float = 0.0

    def __post_init__(self) -> None:
        if self.on_no_call not in ("continue", "end"):
            raise ValueError(f"on_no_call must be 'continue' or 'end', got {self.on_no_call!r}")
        if self.max_calls < 1:
            raise ValueError(f"max_calls must be at least 1, got {self.max_calls}")
        if self.wait_ticks < 0:
            raise ValueError(f"wait_ticks must be >= 0, got {self.wait_ticks}")
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"max_turns must be at least 1 (or None), got {self.max_turns}")
        if self.call_format not in FORMATS:
            raise ValueError(f"call_format must be one of {', '.join(FORMATS)}, got {self.call_format!r}")
        if self.text_calls not in TEXT_CALLS:
            raise ValueError(f"text_calls must be 'tool_calls' or 'user', got {self.text_calls!r}")
        if not (isinstance(self.no_call_penalty, (int, float)) and self.no_call_penalty >= 0):
            raise ValueError(f"no_call_penalty must be a number >= 0, got {self.no_call_penalty!r}")

    @classmethod
    def pop(cls, kwargs: dict[str, Any]) -> ChatOptions:
        """The chat options taken out of ``kwargs`` (what is left is for the environment)."""
        return cls(**{f.name: kwargs.pop(f.name) for f in dataclasses.fields(cls) if f.name in kwargs})


@dataclasses.dataclass(slots=True)
class _Planned:
    """One call of a reply: what was read, and the id it is answered under (None: answered in the user message)."""

    call: ParsedCall
    id: str | None


class ChatSession:
    """One agent's episode as a conversation; see the module docstring."""

    def __init__(self, backend: Backend, options: ChatOptions | None = None, **keywords: Any):
        self.backend = backend
        self.options = dataclasses.replace(options or ChatOptions(), **keywords)
        self.tools = backend.tools
        self._messages: list[dict[str, Any]] = []
        self._encoded: list[str] = []  # each message's JSON, for the copies handed out
        self.turn = 0
        self.ticks = 0
        self.episode_return = 0.0
        self.done = True
        self.last_info: dict[str, Any] = {}
        self._position: tuple[float, float, float] | None = None  # to tell whether the agent walks on
        self._moved = False

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The transcript so far (a copy: changing it never changes the session's)."""
        return self.messages_from(0)

    def messages_from(self, start: int) -> list[dict[str, Any]]:
        """Copies of the transcript's messages from index ``start`` on. A caller that shows a model the
        transcript every turn keeps its own copy and adds the new ones: copying the whole transcript
        each turn took 60% of a 256-session chat step."""
        return json.loads(f"[{','.join(self._encoded[start:])}]")  # each message's JSON, kept as appended

    def _append(self, messages: list[dict[str, Any]]) -> None:
        """The transcript only grows: messages are plain JSON (see :func:`_plain`), never changed once in."""
        self._messages += messages
        self._encoded += [json.dumps(message) for message in messages]

    @property
    def length(self) -> int:
        """Messages in the transcript: while a reply plays, the index it will take (no copy made)."""
        return len(self._messages)

    @property
    def scenario(self) -> str:
        return self.backend.scenario

    @property
    def turn_budget(self) -> int | None:
        """The replies this episode allows: ``max_turns`` or the scenario's own limit, the smaller."""
        limits = [n for n in (self.options.max_turns, self.backend.turn_limit) if n is not None]
        return min(limits) if limits else None

    async def reset(self, seed: int | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Start an episode: the opening messages (system, user) and the OpenAI tool schemas."""
        o = self.options
        observation, info = await self.backend.reset(seed)
        system = system_prompt(self.scenario, o.max_calls, o.on_no_call == "end", call_format=o.call_format,
                               turns=self.turn_budget, tools=self.tools if o.tools_in_prompt else None,
                               no_call_penalty=o.no_call_penalty, **self.backend.prompt_facts())
        self.turn = self.ticks = 0
        self._messages, self._encoded = [], []
        self._append([{"role": "system", "content": system}, {"role": "user", "content": self._marked(observation)}])
        self.episode_return = 0.0
        self.done = False
        self.last_info = dict(info)
        self._position, self._moved = getattr(self.backend, "start_position", None), False
        return self.messages, [dict(tool) for tool in self.tools]

    async def step(self, reply: Any) -> ChatStep:
        """Play one assistant reply: its calls as ticks, then the next observation."""
        if self.done:
            raise RuntimeError("the episode is over (or never began): call reset() first")
        message = assistant_message(reply)  # a bad reply raises here, before anything changed
        try:
            return await self._play(message)
        except BaseException:
            self.done = True  # the world failed mid-turn: the transcript stays as it was before the reply
            raise

    def _declare(self, message: dict[str, Any], parsed: ParseResult,
                 turn: int) -> tuple[dict[str, Any], list[_Planned]]:
        """The assistant message as stored, and each call with the id it is answered under.

        Native ``tool_calls`` entries keep their id (made unique; ``call_<turn>_<k>`` when missing);
        an entry that is not a call (not an object, no function name) is left out and answered in
        the user message. Calls read from text are declared as ``tool_calls`` beside the raw text
        (``text_calls="tool_calls"``) or answered in the user message (``"user"``).
        """
        o = self.options
        stored: dict[str, Any] = {"role": "assistant", "content": _text(message.get("content"))}
        for key in ("name", "reasoning_content"):
            if isinstance(message.get(key), str):
                stored[key] = message[key]
        declared: list[dict[str, Any]] = []
        plan: list[_Planned] = []
        taken: set[str] = set()
        native = parsed.format == "openai"
        # the calls were read from this list: a native format with anything else holds no call
        entries = message["tool_calls"] if native and isinstance(message.get("tool_calls"), list) else []
        for k, call in enumerate(parsed.calls):
            entry = entries[k] if native else None
            function = entry.get("function") if isinstance(entry, dict) else None
            if native and not (isinstance(function, dict) and isinstance(function.get("name"), str)
                               and function["name"] and _json_object_text(function.get("arguments"))):
                plan.append(_Planned(call, None))  # not a call a server would take back: answered in text
                continue
            if not native and (o.text_calls == "user" or not call.ok):
                plan.append(_Planned(call, None))
                continue
            wanted = entry.get("id") if native else None
            call_id = _unique(wanted if isinstance(wanted, str) and wanted else f"call_{turn}_{k}", taken)
            if native:
                name, arguments = function["name"], function.get("arguments")
            else:
                name, arguments = call.name, call.arguments
            declared.append({"id": call_id, "type": "function",
                             "function": {"name": name, "arguments": _arguments_text(arguments)}})
            plan.append(_Planned(call, call_id))
        if declared:
            stored["tool_calls"] = declared
            if o.null_content and not stored["content"]:
                stored["content"] = None
        return stored, plan

    async def _play(self, message: dict[str, Any]) -> ChatStep:
        o = self.options
        turn = self.turn + 1
        parsed = await _read(message, self.tools, o)
        stored, plan = self._declare(message, parsed, turn)
        answers: list[dict[str, Any]] = []  # the tool messages
        notes: list[str] = []  # results of calls without an id, then what happened, for the user message
        reward, terminated, truncated, info = 0.0, False, False, self.last_info
        invalid: list[dict[str, Any]] = []
        ticks = 0
        observation: str | Callable[[], str] = ""

        for k, planned in enumerate(plan):
            call = planned.call
            if terminated or truncated or k >= o.max_calls:
                why = "the episode had ended" if terminated or truncated else \
                    f"at most {o.max_calls} calls run per reply"
                code, result = NOT_RUN, _error(NOT_RUN, f"not run: {why}")
                invalid.append({"name": call.name, "code": NOT_RUN, "why": why})
            else:
                tick = await self._tick(call.as_call() if call.ok else None)
                ticks += 1
                reward += tick.reward
                terminated, truncated, info = tick.terminated, tick.truncated, tick.info
                observation = tick.observation
                if not call.ok:
                    code, result = "INVALID_PARAMS", _error("INVALID_PARAMS", _unreadable(call))
                else:
                    code, result = tick.error_code, tick.result
                if code is not None:
                    invalid.append({"name": call.name, "code": code, "why": _why(call, result)})
            if planned.id is not None:
                answers.append(_tool_message(planned.id, result))
            else:
                notes.append(f"Result of call {k + 1} ({call.name or 'unreadable'}): {result}")
        if parsed.dropped:
            notes.append(f"{parsed.dropped} more calls were not read (at most {MAX_CALLS} per reply).")

        ended_by = None
        readable = any(planned.call.ok for planned in plan)
        penalty = 0.0 if readable else float(o.no_call_penalty)
        if parsed.failure:
            if o.on_no_call == "end":
                truncated, ended_by = True, "no_tool_call"
                observation = ""
            else:
                tick = await self._tick(None)
                ticks += 1
                reward += tick.reward
                terminated, truncated, info = tick.terminated, tick.truncated, tick.info
                observation = tick.observation
            notes.append(f"No tool call found ({parsed.error}); "
                         f"{no_call_note(self.scenario, o.on_no_call == 'end')}.")
        reward -= penalty

        # let a walking agent arrive (a crafting one finish) before asking again
        waited = 0
        while waited < o.wait_ticks and self._moved and not (terminated or truncated):
            tick = await self._tick(None)
            ticks += 1
            waited += 1
            reward += tick.reward
            terminated, truncated, info = tick.terminated, tick.truncated, tick.info
            observation = tick.observation

        if not (terminated or truncated) and o.max_turns is not None and turn >= o.max_turns:
            truncated, ended_by = True, "max_turns"
        if callable(observation):
            observation = observation()
        new = answers
        user = "\n".join(part for part in (*notes, self._marked(observation, turn)) if part)
        if user:
            new.append({"role": "user", "content": user})
        self._append([stored, *new])  # the reply and its answers together: the transcript stays valid
        self.turn = turn
        self.ticks += ticks
        self.episode_return += reward
        self.done = terminated or truncated
        self.last_info = info
        step_info = {**info, **parsed.telemetry(), "turn": turn, "ticks": ticks,
                     "calls_invalid": len(invalid), "invalid": invalid, "ended_by": ended_by,
                     "no_call_penalty": penalty}
        return ChatStep(self.messages_from(len(self._messages) - len(new)), float(reward), bool(terminated),
                        bool(truncated), step_info)

    def _marked(self, observation: str, turn: int = 0) -> str:
        """The observation with its ``[turn i/N]`` marker counting replies against the turn budget.

        Treasure Hunt's own marker (``[turn a/b | cwd ...]``) counts tool calls: it is rewritten to
        count replies, the calls moved to its end when a reply may hold several."""
        budget = self.turn_budget
        if not observation or budget is None:
            return observation
        marker = _HUNT_MARKER.search(observation)
        if marker is None:
            return f"{observation}\n[turn {turn}/{budget}]"
        calls = f" | tool calls {marker['calls']}/{marker['limit']}" if self.options.max_calls > 1 else ""
        return (observation[:marker.start()] + f"[turn {turn}/{budget} | {marker['rest']}{calls}]"
                + observation[marker.end():])

    async def _tick(self, call: dict[str, Any] | None) -> Tick:
        tick = await self.backend.tick(call)
        self._moved = tick.busy or (tick.position is not None and tick.position != self._position)
        self._position = tick.position
        return tick

    async def close(self) -> None:
        """Give the session's world back (a pooled world is reset and freed)."""
        self.done = True
        await self.backend.close()


PARSE_ON_LOOP_CHARS = 2048
"""A reply holding more text than this (as JSON) is read in a worker thread, off the event loop."""
_parsers = Workers(4, "chat-parse")  # threads of their own: the loop's default executor dies with its loop


async def _read(message: dict[str, Any], tools: list[dict[str, Any]], options: ChatOptions) -> ParseResult:
    """The calls of one reply, as :func:`parse_reply` reads them.

    A long reply is read in a worker thread: reading is linear in its length, but 200 KB
    still take a while, during which the pool's other sessions (on the same event loop)
    must go on. A short one is read on the loop, where it costs less than the hand-over.
    """
    if len(json.dumps(message)) <= PARSE_ON_LOOP_CHARS:
        return parse_reply(message, tools, strict=options.strict_parse, expected=options.call_format)
    return await _parsers.run(parse_reply, message, tools, strict=options.strict_parse, expected=options.call_format)


_HUNT_MARKER = re.compile(r"\[turn (?P<calls>\d+)/(?P<limit>\d+) \| (?P<rest>cwd [^\n]*)\]$")


def assistant_message(reply: Any) -> dict[str, Any]:
    """An assistant reply as a plain OpenAI message dict (text becomes ``content``); an independent copy."""
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
    message: dict[str, Any] = {"role": "assistant", "content": _text(reply.get("content"))}
    for key in ("tool_calls", "reasoning_content", "name"):
        if reply.get(key) is not None:
            message[key] = _plain(reply[key])
    if message.get("tool_calls") == []:
        del message["tool_calls"]
    return message


def _text(content: Any) -> str:
    """Content as a string: text parts joined, None as ''."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
    return "" if content is None else str(content)


def _plain(value: Any) -> Any:
    """A plain, independent JSON copy (anything else becomes its text)."""
    return json.loads(json.dumps(value, default=str))


def _unique(call_id: str, taken: set[str]) -> str:
    candidate, n = call_id, 1
    while candidate in taken:
        candidate, n = f"{call_id}_{n}", n + 1
    taken.add(candidate)
    return candidate


def _json_object_text(arguments: Any) -> bool:
    """Whether ``arguments`` can be declared: an object, nothing, or a string holding a JSON object
    (servers that render calls through chat templates decode it)."""
    if not isinstance(arguments, str):
        return arguments is None or isinstance(arguments, dict)
    try:
        return isinstance(json.loads(arguments), dict)
    except (ValueError, RecursionError):
        return False


def _arguments_text(arguments: Any) -> str:
    """Call arguments as the JSON string OpenAI messages carry (a model's string is kept as written)."""
    if isinstance(arguments, str):
        return arguments
    return "{}" if arguments is None else json.dumps(arguments, default=str)


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


# -- many sessions ----------------------------------------------------------------------


class ChatPool:
    """Chat sessions of one scenario sharing one engine.

    For the 2D scenarios the sessions are ids of a :class:`~arena_envs.tools.ToolPool` of
    ``size`` worlds: concurrent ``step`` calls advance in one batched numpy step. Treasure
    Hunt sessions each play their own text env (there is nothing to batch), or, with
    ``remote="http://127.0.0.1:8000"``, one session each of an ``arena-serve treasure_hunt``
    server through OpenEnv's client, with the same messages.
    """

    def __init__(self, env_id: str, size: int = 64, *, timeout: float = 30.0, record: str | Path | None = None,
                 remote: str | None = None, **kwargs: Any):
        env_id = resolve(env_id).env_id  # any spelling of the name
        self.options = ChatOptions.pop(kwargs)  # the chat options (ChatOptions' fields); the rest is the env's
        self.env_id, self.size, self.env_kwargs, self.remote = env_id, size, kwargs, remote
        if remote is not None and (env_id != TREASURE_HUNT or kwargs or record is not None):
            raise ValueError("remote= plays Treasure Hunt on an arena-serve server, unrecorded; its environment "
                             "arguments are the server's (arena-serve treasure_hunt --env-kwarg ...)"
                             if env_id == TREASURE_HUNT else "remote= covers Treasure Hunt (arena-serve treasure_hunt)")
        self.recording = None  # with record=DIR, every episode goes to DIR/episodes.jsonl (arena_envs.llm.record)
        if record is not None:
            from arena_envs.wrappers.record import EPISODES_FILE, EpisodeFile

            self.recording = EpisodeFile(Path(record) / EPISODES_FILE)
        self.scenario = scenario_name(env_id)
        if self.scenario == "TeamCapture":
            raise ValueError("Team Capture has several agents: play it with arena_envs.llm.team.TeamChat")
        self.tool_pool = None
        if env_id != TREASURE_HUNT:
            from arena_envs.tools import ToolPool

            self.tool_pool = ToolPool(env_id, size=size, timeout=timeout, **self.env_kwargs)
        self._count = 0

    def session(self) -> ChatSession:
        """A new session (it takes a world at its first ``reset`` and frees it at ``close``)."""
        self._count += 1
        if self.remote is not None:
            return ChatSession(RemoteHuntBackend(self.remote), self.options)
        if self.tool_pool is None:  # a recorded hunt also draws its explored tree
            backend: Backend = HuntBackend(**self.env_kwargs, **({"render_mode": "ansi"} if self.recording else {}))
        else:
            backend = PoolBackend(self.tool_pool, id=f"chat-{self._count}")
        if self.recording is None:
            return ChatSession(backend, self.options)
        from arena_envs.llm.record import RecordingBackend

        recorder = RecordingBackend(backend, self.recording, self.env_id)
        recorder.session = session = ChatSession(recorder, self.options)
        return session


class ChatBatch:
    """``size`` sessions stepped together from synchronous code (one event loop of its own).

        batch = ChatBatch("arena_envs/Foraging-v0", size=32)
        openings = batch.reset(seed=0)                       # session i gets seed 0 + i
        steps = batch.step([reply_0, ..., reply_31])         # None: that session sits this step out
    """

    def __init__(self, env_id: str, size: int = 1, **options: Any):
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        if options.get("remote") is not None or _loop_running():
            # remote sessions hold WebSockets whose keep-alive pings must be answered while the
            # caller computes between steps (a model generating): their loop runs on its own thread;
            # so does the loop of a caller inside a running loop (a notebook), where another cannot run
            self._thread = threading.Thread(target=self._loop.run_forever, name="chat-batch", daemon=True)
            self._thread.start()
        else:
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
            if self._thread is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join()
            self._loop.close()

    def _run(self, awaitable):
        if self._thread is not None:
            return asyncio.run_coroutine_threadsafe(awaitable, self._loop).result()
        return self._loop.run_until_complete(awaitable)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _gather(*awaitables):
    return await asyncio.gather(*awaitables)


async def _make_pool(env_id: str, size: int, options: dict[str, Any]) -> ChatPool:
    return ChatPool(env_id, size, **options)


class ChatEnv:
    """One chat session from synchronous code: ``reset(seed)`` and ``step(reply)`` like a Gymnasium env.

    Inside a running event loop (a notebook) its own loop runs on a thread; async code can use the
    :class:`ChatSession` of a :class:`ChatPool` directly instead.
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
