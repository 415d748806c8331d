"""Check that a list of chat messages is a valid OpenAI chat sequence, the way strict servers check it.

    from arena_envs.llm import validate_messages, TranscriptError

    validate_messages(messages)                 # None, or raises TranscriptError (a ValueError)
    validate_messages(messages, tools=schemas)  # the tool schemas are checked too

The first broken rule raises :class:`TranscriptError`, a ``ValueError`` whose message names
the message's index and the rule (``messages[4]: rule 'tool-answers-call': ...``) and whose
``index`` and ``rule`` attributes say the same to a program.

Rules (the ``rule`` of the error):

- ``list``: ``messages`` is a non-empty list.
- ``object``: each message is a dict.
- ``role``: ``role`` is system, developer, user, assistant or tool.
- ``keys``: no key the role does not have (e.g. ``tool_call_id`` on a user message).
- ``content``: a string or a non-empty list of content parts (``{"type": "text", "text": ...}``...);
  never missing or ``null``, except on an assistant message with ``tool_calls`` when
  ``null_content=True``.
- ``name``: ``name``, ``reasoning_content`` and ``refusal``, when present, are strings.
- ``tool-calls``: ``tool_calls`` is a non-empty list of ``{"id", "type": "function", "function":
  {"name", "arguments"}}`` with a non-empty string id and name, and arguments a string holding a
  JSON object (llama.cpp decodes it to render the call).
- ``unique-ids``: no id twice among one message's ``tool_calls``.
- ``tool-answers-call``: a ``tool`` message answers, by its ``tool_call_id``, a call of the
  assistant message right before its run of tool messages, not answered yet.
- ``calls-answered``: every declared call is answered before any other message (and before the end).
- ``tools``: ``tools``, when given, are OpenAI function schemas with distinct names.

OpenAI's API refuses a request that breaks any of these; llama.cpp's server refuses ``null`` content
with ``tool_calls`` (hence the ``null_content`` default) but takes a tool message for a call never
declared, so it cannot judge pairing (tests/test_real_model.py shows both).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

ROLES = ("system", "developer", "user", "assistant", "tool")
KEYS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "reasoning_content", "refusal"},
    "tool": {"role", "content", "tool_call_id"},
}
_PART_TEXT = {"text": "text", "image_url": "image_url", "input_audio": "input_audio", "file": "file"}


class TranscriptError(ValueError):
    """A broken message rule: ``index`` (None: the list itself or the tools) and ``rule`` name it."""

    def __init__(self, index: int | None, rule: str, detail: str):
        where = "messages" if index is None else f"messages[{index}]"
        super().__init__(f"{where}: rule {rule!r}: {detail}")
        self.index, self.rule, self.detail = index, rule, detail


def validate_messages(messages: Any, tools: Any = None, *, null_content: bool = False) -> None:
    """Raise :class:`TranscriptError` at the first rule ``messages`` (and ``tools``) break; see the
    module docstring for the rules. ``null_content=True`` accepts ``content: null`` on an
    assistant message with ``tool_calls`` (OpenAI does; llama.cpp's server does not)."""
    if tools is not None:
        _check_tools(tools)
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)) or not messages:
        raise TranscriptError(None, "list", f"expected a non-empty list of messages, got {_kind(messages)}")
    pending: list[str] = []  # ids declared by the last assistant message and not answered yet
    declared: set[str] = set()
    for index, message in enumerate(messages):
        role = _check_message(index, message, null_content)
        if role == "tool":
            call_id = message["tool_call_id"]
            if call_id not in declared:
                raise TranscriptError(index, "tool-answers-call",
                                      f"tool_call_id {call_id!r} answers no call of the assistant message "
                                      "before this run of tool messages")
            if call_id not in pending:
                raise TranscriptError(index, "tool-answers-call", f"tool_call_id {call_id!r} is answered twice")
            pending.remove(call_id)
            continue
        if pending:
            raise TranscriptError(index, "calls-answered",
                                  f"a {role} message comes before the calls {pending} were answered")
        declared = {call["id"] for call in message.get("tool_calls") or ()} if role == "assistant" else set()
        pending = [call["id"] for call in message.get("tool_calls") or ()] if role == "assistant" else []
    if pending:
        raise TranscriptError(len(messages) - 1, "calls-answered",
                              f"the transcript ends before the calls {pending} were answered")


def _check_message(index: int, message: Any, null_content: bool) -> str:
    if not isinstance(message, Mapping):
        raise TranscriptError(index, "object", f"a message must be an object, got {_kind(message)}")
    role = message.get("role")
    if role not in ROLES:
        raise TranscriptError(index, "role", f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    extra = sorted(str(key) for key in message if key not in KEYS[role])
    if extra:
        raise TranscriptError(index, "keys", f"a {role} message has no {', '.join(map(repr, extra))}")
    for key in ("name", "reasoning_content", "refusal"):
        if key in message and not isinstance(message[key], str):
            raise TranscriptError(index, "name", f"{key!r} must be a string, got {_kind(message[key])}")
    calls = message.get("tool_calls")
    if role == "assistant" and "tool_calls" in message:
        _check_calls(index, calls)
    content = message.get("content")
    if content is None:
        if not (null_content and calls):
            missing = "missing" if "content" not in message else "null"
            raise TranscriptError(index, "content", f"content is {missing}; it must be a string"
                                  + ("" if role != "assistant" or not calls else
                                     " ('' with tool_calls: llama.cpp's server refuses null)"))
    elif not isinstance(content, str):
        _check_parts(index, content)
    if role == "tool" and not (isinstance(message.get("tool_call_id"), str) and message["tool_call_id"]):
        raise TranscriptError(index, "tool-answers-call", "a tool message needs a non-empty string tool_call_id")
    return role


def _check_parts(index: int, content: Any) -> None:
    if not isinstance(content, list) or not content:
        raise TranscriptError(index, "content", f"content must be a string or a non-empty list of parts, "
                                                f"got {_kind(content)}")
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind not in _PART_TEXT or not isinstance(part, Mapping) or _PART_TEXT[kind] not in part:
            raise TranscriptError(index, "content", f"content part {k} is not a content part ({_kind(part)})")
        if kind == "text" and not isinstance(part["text"], str):
            raise TranscriptError(index, "content", f"content part {k}: 'text' must be a string")


def _check_calls(index: int, calls: Any) -> None:
    if not isinstance(calls, list) or not calls:
        raise TranscriptError(index, "tool-calls", f"tool_calls must be a non-empty list, got {_kind(calls)}")
    seen: set[str] = set()
    for k, call in enumerate(calls):
        where = f"tool_calls[{k}]"
        if not isinstance(call, Mapping):
            raise TranscriptError(index, "tool-calls", f"{where} must be an object, got {_kind(call)}")
        extra = sorted(str(key) for key in call if key not in ("id", "type", "function"))
        if extra:
            raise TranscriptError(index, "tool-calls", f"{where} has unknown keys {extra}")
        if not (isinstance(call.get("id"), str) and call["id"]):
            raise TranscriptError(index, "tool-calls", f"{where} needs a non-empty string id")
        if call.get("type") != "function":
            raise TranscriptError(index, "tool-calls", f"{where}: type must be 'function', got {call.get('type')!r}")
        function = call.get("function")
        if not isinstance(function, Mapping) or not (isinstance(function.get("name"), str) and function["name"]):
            raise TranscriptError(index, "tool-calls", f"{where}: function needs a non-empty string name")
        if not isinstance(function.get("arguments"), str):
            raise TranscriptError(index, "tool-calls", f"{where}: function.arguments must be a JSON string, "
                                                       f"got {_kind(function.get('arguments'))}")
        if not _is_json_object(function["arguments"]):
            raise TranscriptError(index, "tool-calls", f"{where}: function.arguments must hold a JSON object "
                                                       "(servers decode it to render the call)")
        if call["id"] in seen:
            raise TranscriptError(index, "unique-ids", f"{where}: id {call['id']!r} is used twice")
        seen.add(call["id"])


def _check_tools(tools: Any) -> None:
    if not isinstance(tools, list):
        raise TranscriptError(None, "tools", f"tools must be a list, got {_kind(tools)}")
    names: set[str] = set()
    for k, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(tool, Mapping) or tool.get("type") != "function" or not isinstance(function, Mapping):
            raise TranscriptError(None, "tools", f"tools[{k}] must be {{'type': 'function', 'function': {{...}}}}")
        name = function.get("name")
        if not (isinstance(name, str) and name) or name in names:
            raise TranscriptError(None, "tools", f"tools[{k}]: the name {name!r} is missing or used twice")
        if not isinstance(function.get("parameters", {}), Mapping):
            raise TranscriptError(None, "tools", f"tools[{k}]: parameters must be a JSON schema object")
        names.add(name)


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
