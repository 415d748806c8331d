"""verifiers' door: a scenario as a verifiers environment, for ``vf-eval`` and the trainers that load them.

    vf-eval arena_envs.verifiers -a '{"scenario": "TreasureHunt", "difficulty": "easy", "num_examples": 8}' \\
        -m MODEL -b http://127.0.0.1:8000/v1 -r 4 -s

``load_environment(scenario=..., difficulty=..., num_examples=...)`` returns a ``vf.MultiTurnEnv``:

- its dataset is one row per seed (``seed``, ``seed + 1``...): the prompt is the chat session's opening
  (system message, first observation) of that seed's world, ``info["seed"]`` the seed;
- each rollout plays a chat session of its own (:class:`~arena_envs.llm.chat.ChatSession`, the core under
  every front end), reset at the row's seed; the 2D scenarios' sessions share one batched
  :class:`~arena_envs.tools.ToolPool` of ``max_concurrent`` worlds, one world per rollout, so rollouts run
  concurrently never share a world;
- the model's reply is played as the session plays any reply (native ``tool_calls`` or calls written in the
  text), and the session's answers (tool messages, then the observation) are the environment's response;
- the rubric is the episode's return (weight 1) and, as zero-weight metrics, the telemetry: the share of
  replies holding a readable call (``readable_call_rate``), ``success`` and ``turns``.

Treasure Hunt, Foraging and Crafting are served (Team Capture is several agents, which a verifiers
rollout is not). The chat options (:class:`~arena_envs.llm.chat.ChatOptions`: ``max_turns``,
``wait_ticks``, ``call_format``...) and the environment's arguments are keywords of ``load_environment``
too; the defaults are TRL's door's (:data:`arena_envs.trl.DEFAULT_OPTIONS`), with calls read from text
answered in the user message (``text_calls="user"``), since verifiers keeps the model's reply as it came.

What verifiers cannot express, and what happens instead: its rollout loop asks the environment for a
response only before the next model call, so the reply that ends the episode is played then, and its
answer is the rollout's final environment response (no model call after it).

verifiers pins versions that clash with the project's venv (``openai<3``, ``mcp``, ``websockets<17``):
it lives in a venv of its own, ``make verifiers`` (see docs/guide/llm-frameworks.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

import verifiers as vf
from datasets import Dataset

from arena_envs.llm.backends import scenario_name
from arena_envs.llm.chat import ChatBatch, ChatPool, ChatSession
from arena_envs.trl import DEFAULT_OPTIONS, SCENARIOS

#: the scenarios a rollout (one agent) plays
SERVED = ("TreasureHunt", "Foraging", "Crafting")
_ANSWERS = {"tool": vf.ToolMessage, "user": vf.UserMessage}


def load_environment(scenario: str = "TreasureHunt", difficulty: str | None = None, num_examples: int = 16,
                     seed: int = 0, max_concurrent: int = 64, **options: Any) -> ArenaEnv:
    """A verifiers environment of ``scenario`` (any spelling): ``num_examples`` rows, seeds ``seed``,
    ``seed + 1``...; ``difficulty`` and ``options`` are the environment's arguments and chat options."""
    title = scenario_name(scenario)  # an unknown name is refused here
    if title not in SERVED:
        raise ValueError(f"{title} has several agents: verifiers' rollouts play one ({', '.join(SERVED)})")
    if not isinstance(num_examples, int) or isinstance(num_examples, bool) or num_examples < 1:
        raise ValueError(f"num_examples must be an int >= 1, got {num_examples!r}")
    options = {**DEFAULT_OPTIONS[title], "text_calls": "user", **options}
    if difficulty is not None:
        options["difficulty"] = difficulty
    return ArenaEnv(SCENARIOS[title], range(seed, seed + num_examples), max_concurrent=max_concurrent, **options)


class ArenaEnv(vf.MultiTurnEnv):
    """A scenario's chat sessions as a verifiers environment (see the module docstring)."""

    def __init__(self, env_id: str, seeds: Iterable[int], *, max_concurrent: int = 64, **options: Any):
        self.arena_id, self.arena_options, self.max_concurrent = env_id, options, max_concurrent
        rows, tools = _openings(env_id, seeds, options)
        rubric = vf.Rubric(funcs=[episode_return], weights=[1.0])
        for metric in (readable_call_rate, success, turns):
            rubric.add_metric(metric)
        dataset = Dataset.from_list(rows)
        super().__init__(dataset=dataset, eval_dataset=dataset, rubric=rubric, max_turns=-1,
                         tool_defs=[vf.Tool(name=t["function"]["name"], description=t["function"]["description"],
                                            parameters=t["function"]["parameters"]) for t in tools])
        self._pool: ChatPool | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._sessions: dict[str, ChatSession] = {}  # trajectory id -> the rollout's session

    def _session(self) -> ChatSession:
        """A new session of the pool of the running loop (a ToolPool's calls are awaited on its loop)."""
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_loop is not loop:
            self._pool = ChatPool(self.arena_id, self.max_concurrent, **self.arena_options)
            self._pool_loop = loop
        return self._pool.session()

    async def setup_state(self, state: vf.State) -> vf.State:
        session = self._sessions[state["trajectory_id"]] = self._session()
        await session.reset(state["info"]["seed"])
        state["arena"] = _tally(session, {})
        return state

    async def get_prompt_messages(self, state: vf.State) -> vf.Messages:
        # verifiers' OpenAI client writes ``content: null`` beside calls and ``tool_calls: null`` without,
        # which llama.cpp's server refuses ("Input should be a valid string", "... a valid list"): "" and []
        return [message.model_copy(update={"content": message.content or "", "tool_calls": message.tool_calls or []})
                if message.role == "assistant" else message
                for message in await super().get_prompt_messages(state)]

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> vf.Messages:
        session = self._sessions[state["trajectory_id"]]
        step = await session.step(_reply(messages[-1]))
        statuses = dict(state["arena"]["parse_statuses"])
        statuses[step.info["parse_status"]] = statuses.get(step.info["parse_status"], 0) + 1
        state["arena"] = _tally(session, statuses)
        answer = [_ANSWERS[message["role"]](**message) for message in step.messages]
        if session.done:  # the reply ended the episode: no model call after it
            state["final_env_response"] = answer
        return answer

    @vf.cleanup
    async def close_session(self, state: vf.State) -> None:
        session = self._sessions.pop(state.get("trajectory_id"), None)
        if session is not None:
            await session.close()


def _openings(env_id: str, seeds: Iterable[int], options: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    """A dataset row per seed (the session's opening messages, the seed in ``info``), and the tools."""
    seeds = [int(seed) for seed in seeds]
    batch = ChatBatch(env_id, 1, **options)
    try:
        rows = []
        for seed in seeds:
            messages, tools = batch.reset([seed])[0]
            rows.append({"prompt": messages, "info": {"seed": seed}, "answer": ""})
    finally:
        batch.close()
    return rows, tools


def _tally(session: ChatSession, statuses: dict[str, int]) -> dict[str, Any]:
    """What the rubric reads, kept in the rollout's state (the session is closed before scoring)."""
    return {"return": float(session.episode_return), "success": bool(session.last_info.get("success", False)),
            "turns": session.turn, "parse_statuses": statuses}


def _reply(message: Any) -> dict[str, Any]:
    """verifiers' assistant message as an OpenAI one, which the session plays."""
    reply: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
    if message.tool_calls:
        reply["tool_calls"] = [{"id": call.id, "type": "function",
                                "function": {"name": call.name, "arguments": call.arguments}}
                               for call in message.tool_calls]
    return reply


def episode_return(state: vf.State) -> float:
    """The episode's return (the sum of the environment's rewards over the rollout)."""
    return state["arena"]["return"] if "arena" in state else 0.0


def readable_call_rate(state: vf.State) -> float:
    """The share of the model's replies that held at least one readable tool call."""
    statuses = state["arena"]["parse_statuses"] if "arena" in state else {}
    return statuses.get("call", 0) / max(1, sum(statuses.values()))


def success(state: vf.State) -> float:
    """1 when the episode ended in the scenario's success (the treasure, all the food...)."""
    return float(state["arena"]["success"]) if "arena" in state else 0.0


def turns(state: vf.State) -> float:
    """The replies the session played."""
    return float(state["arena"]["turns"]) if "arena" in state else 0.0


def episodes_per_second(base_url: str, model: str, scenario: str, episodes: int, **options: Any) -> float:
    """Episodes/s of ``episodes`` rollouts (seeds 0, 1...) through verifiers' own evaluation (``evaluate``, what
    ``vf-eval`` runs, without its env server process) against the OpenAI server at ``base_url``, all at
    once; its dataset made beforehand (``arena-bench --only doors``)."""
    env = load_environment(scenario, num_examples=episodes, max_concurrent=episodes, **options)
    client = vf.ClientConfig(api_base_url=base_url, api_key_var="OPENAI_API_KEY", max_retries=0)
    start = time.perf_counter()
    outputs = asyncio.run(env.evaluate(client=client, model=model, num_examples=episodes, max_concurrent=episodes,
                                       on_progress=[]))
    seconds = time.perf_counter() - start
    errors = [output["error"] for output in outputs["outputs"] if output.get("error")]
    if errors:
        raise RuntimeError(f"{len(errors)} of {episodes} rollouts failed: {errors[0]}")
    return episodes / seconds
