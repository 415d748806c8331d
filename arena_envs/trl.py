"""TRL's door: every scenario as an ``environment_factory`` of TRL's ``GRPOTrainer``.

    from trl import GRPOConfig, GRPOTrainer
    from arena_envs.trl import chatml_tool_template, environment_class

    Hunt = environment_class("TreasureHunt-v0", difficulty="easy")    # a class: one instance per rollout
    trainer = GRPOTrainer(model=model, processing_class=chatml_tool_template(tokenizer),
                          train_dataset=Hunt.dataset(range(64)),       # a row per seed: one seed per group
                          environment_factory=Hunt, args=GRPOConfig(num_generations=4, max_steps=16))
    trainer.train()

``TreasureHunt``, ``Foraging``, ``Crafting`` and ``TeamCapture`` (the model plays ``blue_agent_1``, the
scripted team every other agent) are the classes of each scenario's defaults; ``environment_class(name,
**kwargs)`` makes one with environment arguments and chat options (:class:`~arena_envs.llm.chat.ChatOptions`).

An instance plays one chat session (:class:`~arena_envs.llm.chat.ChatSession`, the core under every
front end): its public methods are the session's tools, made from the tool schemas the session validates
against (typed signatures and Google-style docstrings, as TRL and transformers' ``get_json_schema`` read
them). A method call is one reply holding that one call: the session plays it as it plays any reply, and
the method returns the call's result and the observation after it. ``reset(seed=...)`` (TRL passes the
dataset row) starts the session's episode at the row's seed and returns its first observation, which TRL
appends to the row's user message; ``get_reward()`` is the episode's return.

What TRL's loop cannot express, and what happens instead:

- TRL shows tool results only as ``tool`` messages and never adds a ``user`` message: the observation the
  session puts in its user message follows the result in the tool message.
- A reply without a tool call ends TRL's rollout: the episode ends there (as ``on_no_call="end"``), with
  the return so far. The environment cannot end the rollout either: a call after the episode ended is
  answered with :data:`EPISODE_OVER`, and plays nothing.
- TRL calls the tools of its rollouts one by one, so the 2D worlds are not stepped as one batch: each
  instance plays its own world.
- TRL needs a chat template that renders tool calls and a parser it knows for them; SmolLM2's ChatML
  template renders neither: :func:`chatml_tool_template` gives a ChatML tokenizer the one TRL ships for
  Qwen2.5 (calls in ``<tool_call>`` tags, the project's ``hermes`` format).
"""

from __future__ import annotations

import inspect
import json
import keyword
from collections.abc import Iterable
from typing import Any, Literal

from arena_envs.llm.backends import scenario_name
from arena_envs.llm.chat import ChatBatch, ChatSession

EPISODE_OVER = "The episode is over: reply without a tool call to finish."
CHAT_AGENT = "blue_agent_1"
#: scenario class name -> environment id
SCENARIOS = {"TreasureHunt": "arena_envs/TreasureHunt-v0", "Foraging": "arena_envs/Foraging-v0",
             "Crafting": "arena_envs/Crafting-v0", "TeamCapture": "arena_envs/TeamCapture-v0"}
#: the prompt teaches the calls TRL's ChatML tool template parses (``<tool_call>`` tags, see
#: :func:`chatml_tool_template`); the 2D agents walk: without waiting, a move_to would be answered after
#: one tick (0.1 s) of walking
DEFAULT_OPTIONS = {"TreasureHunt": {"call_format": "hermes"},
                   "Foraging": {"call_format": "hermes", "wait_ticks": 50},
                   "Crafting": {"call_format": "hermes", "wait_ticks": 50},
                   "TeamCapture": {"call_format": "hermes", "wait_ticks": 10}}
_JSON_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict}


class ArenaEnvironment:
    """One chat session of a scenario for TRL's ``environment_factory``; see the module docstring.
    The tool methods are added by :func:`environment_class`."""

    env_id: str = ""
    kwargs: dict[str, Any] = {}  # the class's environment arguments and chat options

    def __init__(self, **kwargs: Any):
        merged = {**type(self).kwargs, **kwargs}
        if scenario_name(self.env_id) == "TeamCapture":
            from arena_envs.llm.team import TeamChatBatch

            self._batch: Any = TeamChatBatch(1, chat_agent=merged.pop("chat_agent", CHAT_AGENT), **merged)
        else:
            self._batch = ChatBatch(self.env_id, 1, **merged)
        self.seed: int | None = None

    @property
    def session(self) -> ChatSession:
        """The chat session played (its transcript is ``session.messages``)."""
        return self._batch.sessions[0]

    def reset(self, seed: int | None = None, **row: Any) -> str:
        """Start the episode of ``seed`` (a dataset row's other columns are ignored): its first observation."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an int or None, got {seed!r}")
        self.seed = seed
        messages, _tools = self._batch.reset([seed])[0]
        return messages[-1]["content"]

    def get_reward(self) -> float:
        """The episode's return so far (the whole return once it is over)."""
        return float(self.session.episode_return)

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        """One reply holding one call, played by the session: the call's result, then the observation."""
        session = self.session
        if session.done:
            return EPISODE_OVER
        call_id = f"call_{session.turn + 1}"
        reply = {"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}
        step = self._batch.step([reply])[0]
        return "\n".join(str(message["content"]) for message in step.messages if message["content"])

    @classmethod
    def dataset(cls, seeds: Iterable[int]):
        """TRL's ``train_dataset``: a row per seed (TRL repeats a row ``num_generations`` times in a row, so a
        group plays one seed), its prompt the session's system message and an empty user message (TRL appends
        the observation ``reset`` returns)."""
        from datasets import Dataset

        seeds = [int(seed) for seed in seeds]
        if not seeds:
            raise ValueError("the dataset needs at least one seed")
        scratch = cls()
        try:
            rows = []
            for seed in seeds:  # the system message is the session's own (it names the budget, the recipes...)
                scratch.reset(seed)
                system = scratch.session.messages[0]
                rows.append({"prompt": [system, {"role": "user", "content": ""}], "seed": seed})
        finally:
            scratch.__exit__()
        return Dataset.from_list(rows)

    def __enter__(self) -> ArenaEnvironment:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._batch.close()


def environment_class(env_id: str, **kwargs: Any) -> type[ArenaEnvironment]:
    """A class for TRL's ``environment_factory``: instances play ``env_id`` (any spelling) with ``kwargs``
    (environment arguments and chat options; Team Capture takes ``chat_agent`` too), the tools its methods."""
    title = scenario_name(env_id)  # any spelling; an unknown name is refused here
    env_id = SCENARIOS[title]
    merged = {**DEFAULT_OPTIONS[title], **kwargs}
    probe_class = type(title, (ArenaEnvironment,), {"env_id": env_id, "kwargs": merged})
    with probe_class() as probe:
        tools = list(probe.session.tools)
    methods = {}
    for schema in tools:
        method = tool_method(schema)
        if method.__name__ in vars(ArenaEnvironment) or method.__name__.startswith("_"):
            raise ValueError(f"the tool {method.__name__!r} would hide the environment's own method")
        methods[method.__name__] = method
    return type(title, (ArenaEnvironment,), {"env_id": env_id, "kwargs": merged, "__module__": __name__,
                                             "__doc__": f"{title} for TRL's environment_factory "
                                                        f"(arena_envs.trl).", **methods})


def tool_method(schema: dict[str, Any]):
    """A method calling the tool of an OpenAI ``schema``: a typed signature and a Google-style docstring
    from which transformers' ``get_json_schema`` gives the schema's names, types, required and enums."""
    function = schema.get("function", schema)
    name = function["name"]
    properties = function.get("parameters", {}).get("properties", {})
    required = set(function.get("parameters", {}).get("required", ()))
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    lines = []
    for argument, spec in properties.items():
        if not argument.isidentifier() or keyword.iskeyword(argument):
            raise ValueError(f"the tool {name!r} has an argument {argument!r} that is no Python name")
        hint = _type_hint(spec)
        optional = argument not in required
        annotations[argument] = hint | None if optional else hint
        parameters.append(inspect.Parameter(argument, inspect.Parameter.KEYWORD_ONLY,
                                            default=None if optional else inspect.Parameter.empty,
                                            annotation=annotations[argument]))
        lines.append(f"    {argument}: {' '.join(str(spec.get('description') or argument).split())}")
    annotations["return"] = str

    def call(self: ArenaEnvironment, **arguments: Any) -> str:
        return self._call(name, {k: v for k, v in arguments.items() if v is not None})

    description = " ".join(str(function.get("description") or name).split())
    doc = description + ("\n\nArgs:\n" + "\n".join(lines) if lines else "") + \
        "\n\nReturns:\n    The call's result, then the observation after it."
    call.__name__ = call.__qualname__ = name
    call.__doc__ = doc
    call.__annotations__ = annotations
    call.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    return call


def _type_hint(spec: dict[str, Any]) -> Any:
    """The Python type of a JSON-schema property (an enum: a ``Literal`` of its values)."""
    if spec.get("enum"):
        return Literal[tuple(spec["enum"])]
    kind = spec.get("type")
    if isinstance(kind, list):  # ["string", "null"]...: the first that is not null
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "array":
        items = spec.get("items")
        return list[_type_hint(items)] if isinstance(items, dict) and items.get("type") else list
    if kind in _JSON_TYPES:
        return _JSON_TYPES[kind]
    raise ValueError(f"no Python type for the JSON schema {spec!r}")


def chatml_tool_template(tokenizer):
    """``tokenizer`` with a chat template TRL can train tool calls with. A template that already renders
    tool calls is kept; a ChatML one that cannot (SmolLM2's) gets TRL's Qwen2.5 template: the same
    ``<|im_start|>``/``<|im_end|>`` turns, the tools listed in the system message, calls written in
    ``<tool_call>`` tags (parsed by TRL's Qwen response template)."""
    from trl.chat_template_utils import qwen2_5_chat_template, supports_tool_calling

    if supports_tool_calling(tokenizer):
        return tokenizer
    if tokenizer.eos_token != "<|im_end|>" or "<|im_start|>" not in tokenizer.get_vocab():
        raise ValueError("the tokenizer's chat template renders no tool calls and is not ChatML: give it a "
                         "tool-calling template (tokenizer.chat_template) before training with TRL's tools")
    tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer


_CLASSES: dict[str, type[ArenaEnvironment]] = {}


def __getattr__(name: str) -> type[ArenaEnvironment]:
    """``TreasureHunt``, ``Foraging``, ``Crafting``, ``TeamCapture``: made on first use (each probes a world)."""
    if name not in SCENARIOS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _CLASSES:
        _CLASSES[name] = environment_class(SCENARIOS[name])
    return _CLASSES[name]
