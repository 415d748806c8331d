"""``Decision``: one tool call chosen by an agent, and a forgiving parser for model output."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from arena_envs.observations import MAX_NAME_CHARS, MAX_TEXT_CHARS, bounded_text, quoted_name, short_repr

from .errors import ToolCallError
from .registry import json_type_name

MAX_OUTPUT_CHARS = 100_000
"""Longer model output is refused rather than searched."""
MAX_JSON_DEPTH = 32
"""Deeper nesting (of JSON text or of a call given as Python data) is refused: a real tool
call nests a few levels, and parsing or printing much deeper data overflows the stack."""
MAX_REASONING_CHARS = 4 * MAX_TEXT_CHARS
"""A decision's reasoning (a model's thought) is kept up to this length."""

_BARE_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]{0,63})\s*(?:\(\s*\))?")  # idle, idle()
# Tokens of JSON text for the bracket scans: a whole string, or one bracket. At a quote the
# string token always matches, to the next quote no backslash escapes or else to the end of
# the text (a lone backslash before the end included), and its possessive loops never
# backtrack: each character is read once, and a scan is linear in the text's length. (A
# pattern that could fail at a quote was tried again at every later quote, each attempt
# reading on to the end: 12 s for 60 KB of `"\` pairs.)
_STRING_TOKEN = r'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)'
_BRACE_TOKENS = re.compile(_STRING_TOKEN + r"|[{}]", re.S)
_BRACKET_TOKENS = re.compile(_STRING_TOKEN + r"|[\[\]{}]", re.S)

_TOOL_KEYS = ("tool", "tool_name", "name", "function", "action")
_TOOL_KEYS_TEXT = ", ".join(f"'{key}'" for key in _TOOL_KEYS)
_PARAM_KEYS = ("params", "arguments", "parameters", "args", "input", "action_input")
_REASONING_KEYS = ("reasoning", "reason", "thought")
_WRAPPER_KEYS = ("function_call", "tool_call", *_TOOL_KEYS)  # when they hold an object
_API_TYPES = ("function", "function_call", "tool_call", "tool_use")
_CALL_KEYS = frozenset((*_WRAPPER_KEYS, "tool_calls", "role"))
_PLAIN_KEYS = frozenset(("tool", "params", "reasoning"))  # Decision.to_dict's shape
_MAX_NESTING = 4
_EMBEDDED_BUDGET_FACTOR = 4  # characters scanned or decoded per character of text, at most
_DECODER = json.JSONDecoder()


@dataclass(slots=True)
class Decision:
    """One tool call: which tool, its parameters and, optionally, why."""

    tool: str
    params: dict[str, Any] = field(default_factory=dict)
    reasoning: str | None = None

    def __post_init__(self) -> None:
        _check_fields(self)

    @classmethod
    def idle(cls, reasoning: str | None = None) -> Decision:
        """The call that does nothing this tick."""
        return cls("idle", {}, reasoning)

    def to_dict(self) -> dict[str, Any]:
        """``{"tool", "params"}`` plus ``"reasoning"`` when there is one; a deep copy."""
        data: dict[str, Any] = {"tool": self.tool, "params": copy.deepcopy(dict(self.params))}
        if self.reasoning is not None:
            data["reasoning"] = self.reasoning
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Decision:
        """The inverse of ``to_dict``. Raises ToolCallError on any other shape."""
        if not isinstance(data, Mapping):
            raise ToolCallError(f"a decision must be an object, got {json_type_name(data)}")
        _check_nesting(data)
        unknown = sorted(bounded_text(key, MAX_NAME_CHARS) if isinstance(key, str) else short_repr(key)
                         for key in data if key not in ("tool", "params", "reasoning"))
        if unknown:
            raise ToolCallError(f"unknown decision key(s): {', '.join(unknown)}", field=unknown[0])
        tool, params, reasoning = data.get("tool"), data.get("params", {}), data.get("reasoning")
        if not isinstance(tool, str) or not tool:
            raise _wrong("tool", "a non-empty string", tool)
        if not isinstance(params, Mapping):
            raise _wrong("params", "an object", params)
        if reasoning is not None and not isinstance(reasoning, str):
            raise _wrong("reasoning", "a string", reasoning)
        return cls(tool, copy.deepcopy(dict(params)), _bounded_reasoning(reasoning))


def _check_fields(decision: Decision) -> None:
    """Refuse a Decision whose fields are not of its types (INVALID_PARAMS naming the field):
    one built by a caller, or changed since, must fail here and not deep in a tool."""
    tool, params, reasoning = decision.tool, decision.params, decision.reasoning
    if type(tool) is not str and not isinstance(tool, str) or not tool.strip():
        raise _wrong("tool", "a non-empty string", tool)
    if type(params) is not dict and not isinstance(params, Mapping):
        raise _wrong("params", "an object", params)
    if reasoning is not None and not isinstance(reasoning, str):
        raise _wrong("reasoning", "a string or null", reasoning)


def _wrong(key: str, expected: str, value: Any) -> ToolCallError:
    return ToolCallError(f"{key!r} must be {expected}, got {json_type_name(value)}", field=key)


def parse_decision(raw: Any) -> Decision:
    """Read a Decision from whatever a model or an agent produced.

    Accepts a Decision; a dict; or text holding JSON, alone, in a fenced block or within
    prose. The tool name may be under ``tool``, ``name``, ``tool_name``, ``function`` or
    ``action``, and the parameters under ``params``, ``arguments`` (an object or a JSON
    string), ``parameters``, ``args``, ``input`` or ``action_input``, or they may sit beside
    the tool name. OpenAI shapes (``{"type": "function", "function": {...}}``, a message
    with one entry in ``tool_calls``, SDK objects with ``model_dump``), Anthropic
    ``tool_use`` blocks and other objects with ``to_dict`` are read too. A bare tool name
    (``idle``, ``"idle"``, ``idle()``) is a call with no parameters. Anything else, and data
    nested deeper than :data:`MAX_JSON_DEPTH`, raises ToolCallError (INVALID_PARAMS).
    The parameters are not checked here: see ``validate_params``.
    """
    if type(raw) is str:  # the common cases first: neither has a model_dump
        return _from_text(raw)
    if type(raw) is dict:
        return _from_mapping(raw)
    if isinstance(raw, Decision):
        _check_fields(raw)  # its fields may have been set since it was made
        return raw
    if callable(getattr(raw, "model_dump", None)):
        raw = raw.model_dump()
    elif not isinstance(raw, (str, Mapping)) and callable(getattr(raw, "to_dict", None)):
        raw = raw.to_dict()
    if isinstance(raw, Mapping):
        return _from_mapping(raw)
    if isinstance(raw, (bytes, bytearray)):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as error:
            raise ToolCallError(f"model output is not UTF-8 text: {error}") from None
    if isinstance(raw, str):
        return _from_text(raw)
    raise ToolCallError(f"expected model output as text, a dict or a Decision, got {type(raw).__name__}")


def _from_text(text: str) -> Decision:
    if len(text) > MAX_OUTPUT_CHARS:
        raise ToolCallError(f"model output is too long ({len(text)} characters, limit {MAX_OUTPUT_CHARS})")
    text = text.strip()
    if not text:
        raise ToolCallError('model output is empty; expected a JSON tool call like {"tool": "<name>"}')
    bare = _BARE_NAME.fullmatch(text)
    if bare is not None and text not in ("true", "false", "null"):
        return Decision(bare.group(1))
    _check_json_depth(text)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as error:  # RecursionError: a deep call stack already
        whole_text_error: Exception | None = error
    else:
        if isinstance(value, str):
            return _from_text(value)  # JSON encoded twice, or a bare name in quotes
        if not isinstance(value, dict):  # what json.loads makes of an object
            raise ToolCallError(f"expected a JSON object holding a tool call, got a JSON {json_type_name(value)}")
        if _is_call_like(value):
            return _from_mapping(value)
        whole_text_error = None  # valid JSON, but the call, if any, is nested inside
    call = _embedded_call(text)
    if call is not None:
        return _from_mapping(call)
    if whole_text_error is None:
        raise ToolCallError(f"no tool name found in the JSON object; expected a key such as {_TOOL_KEYS_TEXT}")
    if text[0] in "{[":
        raise ToolCallError(f"model output is not valid JSON: {whole_text_error}")
    raise ToolCallError(f"no JSON tool call found in model output {quoted_name(text)}")


def _embedded_call(text: str) -> Mapping[str, Any] | None:
    """The first JSON object in ``text`` that looks like a tool call, if any.

    Only balanced ``{...}`` spans are decoded: the outermost ones first, and the spans inside
    one only when it does not decode. Every character scanned or decoded is paid from a budget
    of a few times the text's length, so the search is linear however the braces nest (a
    decode from every ``{`` was quadratic: 0.7 s on a 63 KB reply).
    """
    budget = _EMBEDDED_BUDGET_FACTOR * len(text) + 4096
    pending = [(0, len(text))]  # regions still to search, the next one last
    while pending and budget > 0:
        pos, endpos = pending.pop()
        budget -= endpos - pos
        spans, _unclosed = outer_json_objects(text, pos, endpos)
        inner: list[tuple[int, int]] = []
        for start, end in spans:
            budget -= end - start
            if budget <= 0:
                return None
            try:
                value, _end = _DECODER.raw_decode(text, start)
            except (ValueError, RecursionError):
                inner.append((start + 1, end - 1))
                continue
            call = _first_call_in(value)
            if call is not None:
                return call
        pending.extend(reversed(inner))
    return None


def outer_json_objects(text: str, pos: int = 0, endpos: int | None = None) -> tuple[list[tuple[int, int]], list[int]]:
    """``(spans, unclosed)``: the ``(start, end)`` of each outermost balanced ``{...}`` in
    ``text[pos:endpos]`` (a span inside an object that never closes counts as outermost), and
    where the never-closed objects start. One pass of ``_BRACE_TOKENS``, linear in the
    text's length; braces inside strings do not count, and a string never closed runs to the end."""
    spans: list[tuple[int, int]] = []
    opened: list[int] = []
    for token in _BRACE_TOKENS.finditer(text, pos, len(text) if endpos is None else endpos):
        if token.group() == "{":
            opened.append(token.start())
        elif token.group() == "}" and opened:
            start = opened.pop()
            while spans and spans[-1][0] > start:  # a span inside this one: only the outer one is kept
                spans.pop()
            spans.append((start, token.end()))
    return spans, opened


def _first_call_in(value: Any) -> Mapping[str, Any] | None:
    """The first call-like object in decoded JSON, in document order."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if _is_call_like(item):
                return item
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return None


def _is_call_like(data: dict[str, Any]) -> bool:
    """Whether ``data`` (decoded JSON) names a tool, wraps a call or is a chat message."""
    return not _CALL_KEYS.isdisjoint(data)


def parse_call(raw: Any) -> tuple[str, dict[str, Any]]:
    """``(tool, params)`` of a tool call, as :func:`parse_decision` reads it.

    A call already in the plain shape ``{"tool": ..., "params": {...}}`` is read at once,
    its ``params`` not copied: for the env loop, which reads a call once and keeps nothing.
    """
    plain = _plain(raw)
    if plain is not None:
        return plain[0], plain[1]
    decision = parse_decision(raw)
    return decision.tool, decision.params


def is_plain_call(data: Any) -> bool:
    """Whether ``data`` is a call in ``Decision.to_dict``'s shape, which is read without
    parsing any text (so at a cost linear in its size, whatever it holds)."""
    return _plain(data) is not None


def _plain(data: Any) -> tuple[str, dict[str, Any], str | None] | None:
    """``(tool, params, reasoning)`` of a call in ``Decision.to_dict``'s shape, the usual one; else None."""
    if type(data) is not dict or not data.keys() <= _PLAIN_KEYS:
        return None
    tool, params, reasoning = data.get("tool"), data.get("params", {}), data.get("reasoning")
    if type(tool) is not str or type(params) is not dict or type(reasoning) not in (str, type(None)):
        return None
    tool = tool.strip()
    return (tool, params, reasoning) if tool else None


def _from_mapping(data: Mapping[str, Any], depth: int = 0, reasoning: str | None = None) -> Decision:
    plain = _plain(data)
    if plain is not None:
        tool, params, own_reasoning = plain
        return Decision(tool, dict(params), _bounded_reasoning(reasoning if own_reasoning is None else own_reasoning))
    if depth == 0:
        _check_nesting(data)  # what follows walks and prints the data
    if depth > _MAX_NESTING:
        raise ToolCallError("tool call is nested too deeply")
    own_reasoning = _reasoning(data)
    reasoning = reasoning if own_reasoning is None else own_reasoning
    calls, content = data.get("tool_calls"), data.get("content")
    if not calls and isinstance(content, list):  # Anthropic content blocks
        calls = [b for b in content if isinstance(b, Mapping) and b.get("type") == "tool_use"]
    if calls:
        if not isinstance(calls, list) or not all(isinstance(c, Mapping) for c in calls):
            raise ToolCallError("'tool_calls' must be a list of objects", field="tool_calls")
        if len(calls) != 1:
            raise ToolCallError(f"expected exactly one tool call per step, got {len(calls)}", field="tool_calls")
        return _from_mapping(calls[0], depth + 1, reasoning)
    if "role" in data and isinstance(content, str):  # a chat message answered in text
        return _with_reasoning(_from_text(content), reasoning)
    for key in _WRAPPER_KEYS:
        inner = data.get(key)
        if inner is not None and type(inner) is not str and isinstance(inner, Mapping):  # str: the common case
            return _from_mapping(inner, depth + 1, reasoning)

    tool_key = _first_key(data, _TOOL_KEYS)
    if tool_key is None:
        raise ToolCallError(f"no tool name found; expected a key such as {_TOOL_KEYS_TEXT}", field="tool")
    tool = data[tool_key]
    if not isinstance(tool, str) or not tool.strip():
        raise ToolCallError(f"tool name must be a non-empty string, got {short_repr(tool)}", field="tool")
    tool = tool.strip()

    params_key = _first_key(data, _PARAM_KEYS)
    if params_key is not None:
        params = _params(data[params_key], tool)
    elif data.get("type") in _API_TYPES:
        params = {}
    else:  # flat form: {"tool": "collect", "target_name": "Berry1"}
        params = {k: v for k, v in data.items() if k != tool_key and k not in _REASONING_KEYS}
    return Decision(tool, params, reasoning)


def _params(value: Any, tool: str) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        if not value.strip():
            return {}
        _check_json_depth(value)
        try:
            value = json.loads(value)
        except (ValueError, RecursionError) as error:
            raise ToolCallError(
                f"arguments of {quoted_name(tool)} are not valid JSON: {error}", field="params", tool=tool
            ) from None
    if not isinstance(value, (dict, Mapping)):
        raise ToolCallError(
            f"arguments of {quoted_name(tool)} must be a JSON object, got {json_type_name(value)}",
            field="params",
            tool=tool,
        )
    return dict(value)


def _first_key(data: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        if key in data:
            return key
    return None


def _reasoning(data: Mapping[str, Any]) -> str | None:
    key = _first_key(data, _REASONING_KEYS)
    value = None if key is None else data[key]
    if value is None or isinstance(value, str):
        return _bounded_reasoning(value)
    try:  # the nesting is bounded by now (_check_nesting); a cycle or odd object still fails
        text = json.dumps(value, default=str)
    except (TypeError, ValueError, RecursionError):
        text = short_repr(value)
    return _bounded_reasoning(text)


def _bounded_reasoning(reasoning: str | None) -> str | None:
    return None if reasoning is None else bounded_text(reasoning, MAX_REASONING_CHARS)


def _with_reasoning(decision: Decision, reasoning: str | None) -> Decision:
    if decision.reasoning is None:
        decision.reasoning = reasoning
    return decision


def _too_deep() -> ToolCallError:
    return ToolCallError(f"tool call is nested too deeply: more than {MAX_JSON_DEPTH} levels of objects "
                         "and arrays", field="params")


def _check_json_depth(text: str) -> None:
    """Refuse JSON text nested deeper than MAX_JSON_DEPTH, before any parser recurses into it.

    Counted without recursion, in one linear pass of ``_BRACKET_TOKENS``: the running
    total of brackets opened minus closed outside strings. Text that is not JSON at all may be
    miscounted; it fails to parse anyway, and no deeper than counted: a JSON parser reads
    strings and brackets as the count does, and stops at the first thing that is not JSON.
    """
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:  # cannot be deeper: the usual case
        return
    depth = 0
    for token in _BRACKET_TOKENS.finditer(text):
        bracket = token.group()
        if bracket in ("[", "{"):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise _too_deep()
        elif bracket in ("]", "}"):
            depth -= 1


def _check_nesting(data: Any) -> None:
    """Refuse Python data (a call given as dicts and lists) nested deeper than MAX_JSON_DEPTH.

    A walk with its own stack, so neither depth nor a cycle (which is infinitely deep)
    can overflow the interpreter's; it stops at the first container past the limit, or
    after MAX_NODES containers (shared sublists can make a shallow value huge to walk).
    """
    stack = [(data, 1)]
    for _ in range(MAX_NODES):
        if not stack:
            return
        value, depth = stack.pop()
        if isinstance(value, Mapping):
            children = value.values()
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            raise _too_deep()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (Mapping, list, tuple)))
    if stack:
        raise ToolCallError(f"tool call is too large: more than {MAX_NODES} nested objects and arrays",
                            field="params")


MAX_NODES = 100_000
