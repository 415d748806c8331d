"""The call formats models write: their names and markers, writing calls in each, and ``<think>`` blocks.

    format_reply([("cat", {"file": "start.txt"})], "hermes")
    # the assistant message a Hermes model sends: content "<tool_call> {"name": "cat", ...} </tool_call>"

:mod:`arena_envs.llm.parsers` reads what these write (and much else); its table lists the formats.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

FORMATS = ("openai", "hermes", "qwen3_xml", "llama3_json", "mistral", "json", "bare_name")
STRICT_FORMATS = {  # what a strict parse accepts for each call format (native tool_calls always)
    "openai": ("openai", "json"), "hermes": ("openai", "hermes"), "qwen3_xml": ("openai", "qwen3_xml"),
    "llama3_json": ("openai", "llama3_json"), "mistral": ("openai", "mistral"), "json": ("openai", "json"),
    "bare_name": ("openai", "bare_name", "json"),
}

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_TOOL_CALL_OPEN, _TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
_MISTRAL_TAG, _MISTRAL_ARGS = "[TOOL_CALLS]", "[ARGS]"
_PYTHON_TAG = "<|python_tag|>"


def split_reasoning(text: str) -> tuple[str | None, str]:
    """``(reasoning, rest)``: the ``<think>`` blocks taken out of ``text``.

    A reply that only closes a block (its chat template opened it) has everything before
    ``</think>`` as reasoning; a block never closed runs to the end of the reply.
    """
    thoughts, rest = [], []
    position = 0
    first_open, first_close = text.find(_THINK_OPEN), text.find(_THINK_CLOSE)
    if first_close >= 0 and (first_open < 0 or first_close < first_open):
        thoughts.append(text[:first_close])
        position = first_close + len(_THINK_CLOSE)
    while True:
        start = text.find(_THINK_OPEN, position)
        if start < 0:
            rest.append(text[position:])
            break
        rest.append(text[position:start])
        end = text.find(_THINK_CLOSE, start)
        if end < 0:
            thoughts.append(text[start + len(_THINK_OPEN):])
            break
        thoughts.append(text[start + len(_THINK_OPEN):end])
        position = end + len(_THINK_CLOSE)
    thought = "\n".join(t.strip() for t in thoughts if t.strip())
    return thought or None, "".join(rest)


def format_reply(calls: Sequence[tuple[str, Mapping[str, Any]]], fmt: str, reasoning: str | None = None,
                 prefix: str = "", id_prefix: str = "call") -> dict[str, Any]:
    """The assistant message a model of format ``fmt`` writes for ``calls`` ``[(name, arguments), ...]``.

    The inverse of :func:`parse_reply`, for scripted models and tests. ``reasoning`` is put
    in a ``<think>`` block (text formats); ``prefix`` is prose written before the calls.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")
    think = f"{_THINK_OPEN}\n{reasoning}\n{_THINK_CLOSE}\n\n" if reasoning else ""
    if fmt == "openai":
        tool_calls = [{"id": f"{id_prefix}_{k}", "type": "function",
                       "function": {"name": name, "arguments": json.dumps(dict(arguments))}}
                      for k, (name, arguments) in enumerate(calls)]
        return {"role": "assistant", "content": (think + prefix) or None, "tool_calls": tool_calls}
    if fmt == "hermes":
        body = "\n".join(f"{_TOOL_CALL_OPEN}\n{json.dumps({'name': n, 'arguments': dict(a)})}\n{_TOOL_CALL_CLOSE}"
                         for n, a in calls)
    elif fmt == "qwen3_xml":
        body = "\n".join(
            f"{_TOOL_CALL_OPEN}\n<function={n}>\n"
            + "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
                      for k, v in a.items())
            + f"</function>\n{_TOOL_CALL_CLOSE}" for n, a in calls)
    elif fmt == "llama3_json":
        body = "; ".join(json.dumps({"name": n, "parameters": dict(a)}) for n, a in calls)
    elif fmt == "mistral":
        body = _MISTRAL_TAG + json.dumps([{"name": n, "arguments": dict(a)} for n, a in calls])
    elif fmt == "json":
        body = "\n".join(f"```json\n{json.dumps({'tool': n, 'params': dict(a)})}\n```" for n, a in calls)
    else:  # bare_name: only calls without arguments can be written this way
        if any(a for _, a in calls):
            raise ValueError("a bare tool name cannot carry arguments")
        body = "\n".join(n for n, _ in calls[:1])
    text = think + (prefix + "\n" if prefix and fmt != "bare_name" else "") + body
    return {"role": "assistant", "content": text}
