"""The wire types of the arena server: OpenEnv ``Action``, ``Observation`` and ``State`` models.

An action is one tool call, in any shape the tool layer reads::

    {"tool": "move_to", "params": {"target": [3, 0, 4]}}          # a plain tool-call object
    {"tool": "cat", "file": "start.txt"}                            # parameters beside the name
    {"name": "collect", "arguments": "{\"target_name\": \"Berry1\"}"}
    {"tool_calls": [{"id": "c1", "type": "function", "function": {...}}]}   # OpenAI style
    {"message": {"role": "assistant", "content": "...", "tool_calls": [...]}}  # an assistant message

Team Capture sessions drive a whole team: ``{"calls": {"blue_agent_1": {...}, ...}}``
(an agent left out carries on with its current order).
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import ConfigDict, Field


class ArenaAction(Action):
    """One tool call (or, for a team session, one per agent). Unknown keys are kept: they are
    the parameters of the flat form ``{"tool": "cd", "path": "amber"}``."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    tool: str | None = Field(default=None, description="the tool's name, e.g. 'move_to'")
    params: dict[str, Any] | None = Field(default=None, description="the tool's parameters")
    reasoning: str | None = Field(default=None, description="why (kept, not used)")
    tool_calls: list[dict[str, Any]] | None = Field(default=None, description="OpenAI-style tool_calls")
    message: dict[str, Any] | str | None = Field(
        default=None, description="an assistant message (OpenAI dict or text) holding the call")
    calls: dict[str, Any] | None = Field(
        default=None, description="team sessions: {agent name: tool call}; agents left out carry on")

    def tool_call(self) -> Any:
        """What the tool layer parses: the message if given, else the call object itself."""
        if self.message is not None:
            return self.message
        # what ``model_dump(exclude={"metadata", "calls"}, exclude_none=True)`` gives, read off
        # the attributes: the dump cost 2-3 us a step, and the action is this request's alone
        # (the tool layer only reads it), so its containers need no copy
        data = {}
        for name in _CALL_FIELDS:
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        extra = self.__pydantic_extra__
        if extra:
            data.update({key: value for key, value in extra.items() if value is not None})
        return data


_CALL_FIELDS = ("tool", "params", "reasoning", "tool_calls")
"""ArenaAction's fields that make up a plain call, in declaration order (``message`` is the
whole call when given; ``metadata`` and ``calls`` are never part of one)."""


class ArenaObservation(Observation):
    """What a session sees after each reset or step (``reward`` and ``done`` are OpenEnv's own)."""

    text: str = Field(default="", description="the observation as prompt text")
    observation: dict[str, Any] | None = Field(
        default=None, description="the structured Observation as JSON (per agent for team sessions)")
    tools: list[dict[str, Any]] = Field(
        default_factory=list, description="OpenAI tool schemas (in the reset answer; empty in step answers)")
    terminated: bool = Field(default=False, description="the episode ended by its rules")
    truncated: bool = Field(default=False, description="the episode hit its time limit")
    info: dict[str, Any] = Field(default_factory=dict, description="the env's info (score, success, ...)")
    arrays: dict[str, Any] | None = Field(
        default=None, description="the native observation arrays as lists (reset with arrays=true)")

    def model_dump(self, *, exclude: Any = None, **options: Any) -> dict[str, Any]:
        """pydantic's dump, except for the one OpenEnv's server makes of every answer it sends
        (``serialize_observation``: every field but reward and done, no other option): that
        one gives the fields' values as they are, their containers shared, not copied.

        The server turns that dict into JSON at once. pydantic's own dump walked and copied the
        whole nested observation first, about 11 us of every step served at 256 sessions.
        ``tests/test_serve_sessions.py`` checks the two dumps are equal.
        """
        if exclude == _WIRE_EXCLUDED and not options:
            values = self.__dict__
            return {name: values[name] for name in _WIRE_FIELDS}
        return super().model_dump(exclude=exclude, **options)


_WIRE_EXCLUDED = {"reward", "done"}
"""What OpenEnv's ``serialize_observation`` leaves out of an observation's dump (it sends them beside it)."""
_WIRE_FIELDS = tuple(name for name in ArenaObservation.model_fields if name not in _WIRE_EXCLUDED)


class ArenaState(State):
    """A session's episode: OpenEnv's ``episode_id``/``step_count`` plus the scenario and seed."""

    scenario: str = Field(default="", description="the scenario served")
    seed: int | None = Field(default=None, description="the seed of the current episode")
    done: bool = Field(default=False, description="whether the current episode is over")


def observation_answer(text: str, observation: dict[str, Any] | None, tools: list[dict[str, Any]], *,
                       first: bool, reward: float | None = None, terminated: bool = False, truncated: bool = False,
                       info: dict[str, Any] | None = None, arrays: dict[str, Any] | None = None) -> ArenaObservation:
    """The observation a server answers a reset (``first``) or a step with.

    The tool schemas go with the reset answer only: they do not change within an episode, and
    they were two thirds of every step's JSON (and of its pydantic validation).

    The reset answer's ``metadata`` repeats what it shows (text, observation, info, arrays):
    OpenEnv's MCP client (``MCPToolClient``) reads any answer with a ``tools`` field as a tool
    list and keeps only its ``metadata``, and an MCP agent's first observation is this one.
    """
    metadata = {"text": text, "observation": observation, "info": info or {}, "arrays": arrays} if first else {}
    return ArenaObservation(
        text=text, observation=observation, tools=tools if first else [], reward=None if first else reward,
        done=terminated or truncated, terminated=terminated, truncated=truncated, info=info or {}, arrays=arrays,
        metadata=metadata)


_ANSWER_FIELDS = frozenset(ArenaObservation.model_fields)
_new_answer = ArenaObservation.__new__
_set = object.__setattr__


def step_answer(text: str, observation: dict[str, Any], reward: float, terminated: bool, truncated: bool,
                info: dict[str, Any]) -> ArenaObservation:
    """``observation_answer(..., first=False)`` for values already of the model's types (a
    ``str``, Python ``float`` and ``bool``, JSON-ready dicts), made without validating them.

    Built the way pydantic's ``model_construct`` builds a model (its ``__dict__`` in field
    order, every field set), which itself costs more than validating: validation was about
    4 us of every step a pool server answers, this is under 1.5 us. ``tests/test_serve_sessions.py``
    checks that the two give equal models and the same JSON.
    """
    answer = _new_answer(ArenaObservation)
    _set(answer, "__dict__", {
        "done": terminated or truncated, "reward": reward, "metadata": {}, "text": text, "observation": observation,
        "tools": [], "terminated": terminated, "truncated": truncated, "info": info or {}, "arrays": None})
    _set(answer, "__pydantic_fields_set__", _ANSWER_FIELDS)
    _set(answer, "__pydantic_extra__", None)
    _set(answer, "__pydantic_private__", None)
    return answer
