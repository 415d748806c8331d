"""Read the tool calls in what models actually write, in every common format.

    from arena_envs.llm.parsers import parse_reply

    parsed = parse_reply(assistant_message, tools=schemas)   # an OpenAI message dict, SDK object or text
    parsed.format            # "openai", "hermes", "qwen3_xml", "llama3_json", "mistral", "json", "bare_name" or "none"
    parsed.calls             # [ParsedCall(name, arguments, id, error, raw), ...] in the order written
    parsed.failure           # True when nothing could be read as a call: never silently a success
    parsed.telemetry()       # what the chat environment reports per turn in ``info``

| format        | what the model wrote                                                              |
|---------------|-----------------------------------------------------------------------------------|
| `openai`      | a message with `tool_calls` (`function.arguments` a JSON string), from a server's tool parser |
| `hermes`      | `<tool_call>{"name": .., "arguments": {..}}</tool_call>` per call (Hermes, Qwen2.5/3) |
| `qwen3_xml`   | `<tool_call><function=name><parameter=x>value</parameter></function></tool_call>` (Qwen3-Coder) |
| `llama3_json` | a bare `{"name": .., "parameters": {..}}` object (maybe after `<\\|python_tag\\|>`; `;` joins) |
| `mistral`     | `[TOOL_CALLS][{"name": .., "arguments": {..}}, ..]` or `[TOOL_CALLS]name[ARGS]{..}`   |
| `json`        | a JSON call (`tool`/`name` with `params`/`arguments`...) alone, fenced or inside prose |
| `bare_name`   | only a tool's name, such as `idle` or `pwd()` (needs the tool names)               |

``<think>...</think>`` reasoning (and a ``reasoning_content`` field) is kept apart and never
searched for calls. The parser never raises on what a model sends: deep nesting, huge text,
lone surrogates, binary junk all end as a parse failure or an invalid call naming why.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from arena_envs.llm.formats import (  # noqa: F401  (FORMATS, format_reply: also read from here)
    _MISTRAL_ARGS,
    _MISTRAL_TAG,
    _PYTHON_TAG,
    _TOOL_CALL_CLOSE,
    _TOOL_CALL_OPEN,
    FORMATS,
    STRICT_FORMATS,
    format_reply,
    split_reasoning,
)
from arena_envs.tools import ToolCallError, parse_decision
from arena_envs.tools.decision import outer_json_objects

MAX_REPLY_CHARS = 200_000
"""Longer replies are not searched: a parse failure that says so."""
MAX_CALLS = 32
"""At most this many calls are read from one reply; the rest are reported as dropped."""
MAX_RAW_CHARS = 2_000
"""How much of each call's text is kept in ``ParsedCall.raw``."""

NO_CALL = "none"
PARSE_STATUSES = ("call", "none", "near_miss", "unreadable", "quoted_example", "wrong_format")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\n(.*?)```", re.S)
_FUNCTION = re.compile(r"<function=([^>\n]{1,200})>(.*?)(?:</function>|\Z)", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\n]{1,200})>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.S)
_BARE = re.compile(r"[`'\"]?([A-Za-z_][A-Za-z0-9_-]{0,63})(?:\(\s*\))?[`'\"]?[.!]?")
_MISTRAL_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.-]{0,63})\s*$")


@dataclass(slots=True)
class ParsedCall:
    """One call as the model wrote it.

    ``name`` is None when no tool name could be read; ``arguments`` is None when the
    arguments could not be read as a JSON object. ``error`` says why (None: readable).
    ``id`` is the model's ``tool_call_id`` when it gave one (OpenAI format).
    """

    name: str | None
    arguments: dict[str, Any] | None
    id: str | None = None
    error: str | None = None
    raw: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_call(self) -> dict[str, Any]:
        """The call in the tool layer's plain shape ``{"tool", "params"}``.

        An unreadable call keeps its unreadable arguments (a string the tool layer refuses
        with ``INVALID_PARAMS``), so it can never run as a call without arguments.
        """
        if not self.ok:
            return {"tool": self.name or "", "params": f"<unreadable: {self.error}>"}
        return {"tool": self.name or "", "params": dict(self.arguments or {})}


@dataclass(slots=True)
class ParseResult:
    """Everything read from one assistant reply."""

    format: str
    calls: list[ParsedCall] = field(default_factory=list)
    content: str = ""  # the visible text without reasoning
    reasoning: str | None = None
    error: str | None = None  # why nothing was read (when ``calls`` is empty)
    dropped: int = 0  # calls beyond MAX_CALLS, not read
    miss: str | None = None  # with no readable call: "near_miss", "quoted_example" or "wrong_format" (see status)

    @property
    def failure(self) -> bool:
        """Nothing in the reply could be read as a call."""
        return not self.calls

    @property
    def invalid(self) -> list[ParsedCall]:
        return [call for call in self.calls if not call.ok]

    @property
    def status(self) -> str:
        """What the reply was, one of :data:`PARSE_STATUSES`:

        ``call`` (at least one readable call), ``none`` (no attempt at a call), ``near_miss`` (a
        call written almost right: single quotes, a trailing comma, unbalanced braces...),
        ``unreadable`` (a call attempt that cannot be read), ``quoted_example`` (prose that only
        quotes a call, after "e.g." or in a sentence about the syntax: never run),
        ``wrong_format`` (with a strict parse: a call in another format's syntax).
        """
        if any(call.ok for call in self.calls):
            return "call"
        if self.miss is not None:
            return self.miss
        return "unreadable" if self.calls else NO_CALL

    def telemetry(self) -> dict[str, Any]:
        """Per-turn facts: the format, how many calls were read, which were unreadable and why."""
        return {"format": self.format, "parse_status": self.status, "calls_parsed": len(self.calls),
                "calls_unreadable": len(self.invalid),
                "parse_failure": self.failure, "parse_error": self.error, "calls_dropped": self.dropped,
                "unreadable": [{"name": call.name, "error": call.error} for call in self.invalid]}


def tool_names(tools: Iterable[Any] | None) -> dict[str, dict[str, str]]:
    """``{name: {parameter: JSON type}}`` from OpenAI tool schemas or plain names."""
    names: dict[str, dict[str, str]] = {}
    for entry in tools or ():
        if isinstance(entry, str):
            names[entry] = {}
            continue
        function = entry.get("function", entry) if isinstance(entry, Mapping) else {}
        name = function.get("name") if isinstance(function, Mapping) else None
        if isinstance(name, str):
            properties = (function.get("parameters") or {}).get("properties") or {}
            names[name] = {key: str(value.get("type", "")) for key, value in properties.items()
                           if isinstance(value, Mapping)}
    return names


def parse_reply(message: Any, tools: Iterable[Any] | None = None, *, strict: bool = False,
                expected: str | None = None) -> ParseResult:
    """Read the tool calls of one assistant reply (see the module docstring for the formats).

    ``message``: an OpenAI chat message (dict or SDK object), or its text. ``tools``: the
    OpenAI schemas (or names) offered; they enable bare names and typed XML parameters.
    ``strict``: read only a format's own syntax, a reply that is the call(s) and nothing else
    (no call searched for in prose); with ``expected`` (a format of :data:`FORMATS`) only that
    format (and native ``tool_calls``) counts, any other is a ``wrong_format`` failure.
    """
    if expected is not None and expected not in FORMATS:
        raise ValueError(f"unknown format {expected!r}; formats: {', '.join(FORMATS)}")
    known = tool_names(tools)
    try:
        result = _parse(message, known, strict)
    except RecursionError:
        return ParseResult(NO_CALL, error="the reply is nested too deeply to read")
    if not strict:
        return result
    if expected is not None and result.calls and result.format not in STRICT_FORMATS[expected]:
        return ParseResult(NO_CALL, content=result.content, reasoning=result.reasoning, miss="wrong_format",
                           error=f"a strict parse reads only {expected} calls, and this reply's are {result.format}")
    if not result.calls and result.miss is None and _parse(message, known).status == "call":
        result.miss = "wrong_format"
        result.error = "a strict parse reads a call only when the reply is the call itself, without prose"
    return result


def _parse(message: Any, known: dict[str, dict[str, str]], strict: bool = False) -> ParseResult:
    if callable(getattr(message, "model_dump", None)):
        message = message.model_dump()
    reasoning = None
    if isinstance(message, Mapping):
        calls = message.get("tool_calls")
        reasoning = _text(message.get("reasoning_content") or message.get("reasoning")) or None
        content = _text(message.get("content"))
        if calls:
            result = _openai_calls(calls)
            result.content, result.reasoning = content, reasoning
            return result
    elif isinstance(message, (bytes, bytearray)):
        content = bytes(message).decode("utf-8", errors="replace")
    elif isinstance(message, str) or message is None:
        content = message or ""
    else:
        return ParseResult(NO_CALL, error=f"expected an assistant message or its text, got {type(message).__name__}")

    if len(content) > MAX_REPLY_CHARS:
        return ParseResult(NO_CALL, content=content[:MAX_RAW_CHARS], reasoning=reasoning,
                           error=f"the reply is too long to read ({len(content)} characters, "
                                 f"limit {MAX_REPLY_CHARS})")
    thought, visible = split_reasoning(content)
    reasoning = "\n".join(part for part in (reasoning, thought) if part) or None
    result = _from_text(visible, known, strict)
    result.content, result.reasoning = visible.strip(), reasoning
    return result


def _text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content
                       if isinstance(part, Mapping) and isinstance(part.get("text"), str))
    return ""


# -- the formats ------------------------------------------------------------------------


def _openai_calls(calls: Any) -> ParseResult:
    if not isinstance(calls, Sequence) or isinstance(calls, (str, bytes)):
        return ParseResult("openai", error="'tool_calls' must be a list")
    parsed = []
    for entry in list(calls)[:MAX_CALLS]:
        if callable(getattr(entry, "model_dump", None)):
            entry = entry.model_dump()
        if not isinstance(entry, Mapping):
            parsed.append(ParsedCall(None, None, error="a tool call must be an object", raw=_raw(entry)))
            continue
        call_id = entry.get("id") if isinstance(entry.get("id"), str) else None
        function = entry.get("function")
        if not isinstance(function, Mapping):
            parsed.append(ParsedCall(None, None, call_id, "a tool call needs a 'function' object", _raw(entry)))
            continue
        call = _from_object({"name": function.get("name"), "arguments": function.get("arguments")}, entry)
        call.id = call_id
        parsed.append(call)
    return ParseResult("openai", parsed, dropped=max(0, len(calls) - MAX_CALLS))


def _from_text(text: str, known: dict[str, dict[str, str]], strict: bool = False) -> ParseResult:
    stripped = text.strip()
    if not stripped:
        return ParseResult(NO_CALL, error="the reply is empty: no tool call")
    if _MISTRAL_TAG in text and (not strict or stripped.startswith(_MISTRAL_TAG)):
        return _miss_kind(_mistral(text))
    if (_TOOL_CALL_OPEN in text or "<function=" in text) and (not strict or stripped.startswith(_TOOL_CALL_OPEN)):
        return _miss_kind(_tagged(text, known))
    result = _llama3(stripped)
    if result is not None:
        return result
    result = _fenced(stripped, strict)
    if result is not None and (result.calls or result.miss):
        return _miss_kind(result)
    quoted = result is not None
    search = _embedded(stripped, strict)
    if search.calls:
        return search
    bare = _bare_name(stripped, known)
    if bare is not None:
        return bare
    if search.miss == "near_miss":
        return search
    if quoted or search.miss == "quoted_example":
        return ParseResult(NO_CALL, miss="quoted_example",
                           error="the reply only quotes a call as an example (e.g. after 'for example'); "
                                 "write the call itself")
    preview = stripped if len(stripped) <= 80 else stripped[:77] + "..."
    return ParseResult(NO_CALL, error=f"no tool call found in the reply {preview!r}")


def _miss_kind(result: ParseResult) -> ParseResult:
    """Calls that were all unreadable: a near miss when their text reads as a call after a light repair."""
    if result.calls and not any(call.ok for call in result.calls) and result.miss is None:
        for call in result.calls[:4]:
            why = _near_miss(call.raw)
            if why is not None:
                result.miss = "near_miss"
                call.error = f"{call.error} ({why})"
                break
    return result


def _tagged(text: str, known: dict[str, dict[str, str]]) -> ParseResult:
    """``<tool_call>`` blocks holding JSON (Hermes) or ``<function=..>`` XML (Qwen3-Coder)."""
    blocks = []
    position = 0
    while len(blocks) <= MAX_CALLS:
        start = text.find(_TOOL_CALL_OPEN, position)
        if start < 0:
            break
        end = text.find(_TOOL_CALL_CLOSE, start)
        # a block left open (the server stopped at the closing token) runs to the end
        blocks.append(text[start + len(_TOOL_CALL_OPEN):end if end >= 0 else len(text)])
        position = len(text) if end < 0 else end + len(_TOOL_CALL_CLOSE)
    if not blocks:  # <function=...> written without the wrapper
        blocks = [text]
    calls: list[ParsedCall] = []
    xml = False
    for block in blocks:
        if "<function=" in block:
            xml = True
            calls += [_xml_call(match, known) for match in _FUNCTION.finditer(block)]
        else:
            calls.append(_json_block(block))
    dropped = max(0, len(calls) - MAX_CALLS)
    return ParseResult("qwen3_xml" if xml else "hermes", calls[:MAX_CALLS], dropped=dropped,
                       error=None if calls else "empty <tool_call> block")


def _xml_call(match: re.Match, known: dict[str, dict[str, str]]) -> ParsedCall:
    name = match.group(1).strip()
    types = known.get(name, {})
    arguments: dict[str, Any] = {}
    for parameter in _PARAMETER.finditer(match.group(2)):
        key, value = parameter.group(1).strip(), parameter.group(2).strip("\n")
        arguments[key] = _xml_value(value, types.get(key))
    return ParsedCall(name, arguments, raw=_raw(match.group(0)))


def _xml_value(value: str, json_type: str | None) -> Any:
    """A parameter's text as the schema's type: strings stay text, the rest is read as JSON."""
    if json_type == "string":
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def _json_block(block: str) -> ParsedCall:
    text = _unfenced(block.strip())
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as error:
        value, _ = _first_json(text)
        if value is None:
            return ParsedCall(_guess_name(text), None, error=f"not valid JSON: {error}", raw=_raw(text))
    return _from_object(value, text)


def _llama3(text: str) -> ParseResult | None:
    """A reply that is only JSON call objects with ``parameters`` (several joined by ``;``)."""
    if text.startswith(_PYTHON_TAG):
        text = text[len(_PYTHON_TAG):].strip()
    if not text.startswith("{"):
        return None
    decoder = json.JSONDecoder()
    values, position = [], 0
    try:
        while position < len(text) and len(values) <= MAX_CALLS:
            value, position = decoder.raw_decode(text, position)
            values.append(value)
            while position < len(text) and text[position] in " \t\r\n;":
                position += 1
    except (ValueError, RecursionError):
        return None
    if not values or not all(isinstance(v, dict) and "parameters" in v for v in values):
        return None
    calls = [_from_object(v, v) for v in values]
    return ParseResult("llama3_json", calls[:MAX_CALLS], dropped=max(0, len(calls) - MAX_CALLS))


def _mistral(text: str) -> ParseResult:
    """``[TOOL_CALLS][{..}, ..]`` (v3 tokenizers) or ``[TOOL_CALLS]name[ARGS]{..}`` (v11 and later)."""
    calls: list[ParsedCall] = []
    segments = text.split(_MISTRAL_TAG)[1:]
    for segment in segments:
        if len(calls) > MAX_CALLS:
            break
        if _MISTRAL_ARGS in segment:
            name, _, arguments = segment.partition(_MISTRAL_ARGS)
            named = _MISTRAL_NAME.match(name)
            value, _end = _first_json(arguments.strip())
            if named is None:
                calls.append(ParsedCall(None, None, error="no tool name before [ARGS]", raw=_raw(segment)))
            elif not isinstance(value, dict):
                calls.append(ParsedCall(named.group(1), None, error="the [ARGS] are not a JSON object",
                                        raw=_raw(segment)))
            else:
                calls.append(ParsedCall(named.group(1), value, raw=_raw(segment)))
            continue
        value, _end = _first_json(segment.strip())
        if value is None:
            calls.append(ParsedCall(_guess_name(segment), None, error="no JSON after [TOOL_CALLS]",
                                    raw=_raw(segment)))
            continue
        for item in value if isinstance(value, list) else [value]:
            calls.append(_from_object(item, item))
    return ParseResult("mistral", calls[:MAX_CALLS], dropped=max(0, len(calls) - MAX_CALLS),
                       error=None if calls else "nothing after [TOOL_CALLS]")


def _fenced(text: str, strict: bool = False) -> ParseResult | None:
    """Calls in fenced code blocks: each block one call object or a list of them. Blocks that a
    sentence introduces as an example are not calls: they give an empty result (None: no block)."""
    calls: list[ParsedCall] = []
    quoted = False
    for match in _FENCE.finditer(text[:MAX_REPLY_CHARS]):
        body = match.group(2).strip()
        if not body.startswith(("{", "[")):
            continue
        if strict and text[:match.start()].strip():
            return ParseResult("json", miss="wrong_format",
                               error="a strict parse reads a fenced call only when it is the whole reply")
        if _quoted(text, match.start()):
            quoted = True
            continue
        try:
            value = json.loads(body)
        except (ValueError, RecursionError) as error:
            if match.group(1).lower() in ("json", "tool_call", "tool"):
                calls.append(ParsedCall(_guess_name(body), None, error=f"not valid JSON: {error}", raw=_raw(body)))
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict) and _looks_like_call(item):
                calls.append(_from_object(item, item))
        if len(calls) > MAX_CALLS:
            break
    if not calls:
        return ParseResult(NO_CALL) if quoted else None
    return ParseResult("json", calls[:MAX_CALLS], dropped=max(0, len(calls) - MAX_CALLS))


def _embedded(text: str, strict: bool = False) -> ParseResult:
    """The first JSON call object in the text, alone or (unless ``strict``) within prose.

    One pass finds the outermost balanced ``{...}`` spans (strings skipped whole, so braces in
    them do not count); only those are decoded, each once, so the work is linear in the
    reply's length however its braces nest or fail to close. A call a sentence introduces as
    an example is skipped (``miss="quoted_example"``); a span that reads as a call only after a
    light repair is a ``near_miss``.
    """
    spans, unclosed = outer_json_objects(text)
    if strict:
        spans = [(start, end) for start, end in spans if start == 0 and end == len(text)]
        unclosed = unclosed[:1] if unclosed[:1] == [0] else []
    miss: str | None = None
    near: str | None = None
    for start, end in spans:
        piece = text[start:end]
        try:
            value = json.loads(piece)
        except (ValueError, RecursionError):
            if near is None and _CALL_ATTEMPT.match(piece):
                near = _near_miss(piece)
            continue
        if isinstance(value, dict) and _looks_like_call(value):
            if not strict and _quoted(text, start):
                miss = miss or "quoted_example"
                continue
            return ParseResult("json", [_from_object(value, value)])
    for start in unclosed[:4]:  # an object never closed: a near miss when closing it makes a call
        if near is None and _CALL_ATTEMPT.match(text, start):
            near = _near_miss(text[start:])
    if near is not None:
        return ParseResult(NO_CALL, miss="near_miss", error=f"a malformed call: {near}; write valid JSON")
    return ParseResult(NO_CALL, miss=miss)


_CALL_ATTEMPT = re.compile(r"\{\s*['\"]?(?:name|tool|tool_name|function|action)['\"]?\s*:")
_QUOTE_CUE = re.compile(  # words that introduce an example, right before the object (or its fence)
    r"(?:\be\.g\.|\bfor example|\bfor instance|\bsuch as|\bexample|\blike|\blooks? like this|\bwritten as|"
    r"\b(?:syntax|format) is)\s*[:,]?\s*[`'\"(]*\s*(?:```[A-Za-z0-9_-]*\s*)?$", re.I)


def _quoted(text: str, start: int) -> bool:
    """Whether the sentence before ``start`` introduces what follows as an example of the syntax."""
    before = text[max(0, start - 80):start]
    return _QUOTE_CUE.search(before.rsplit("\n\n", 1)[-1]) is not None


_REPAIRS = (
    ("single quotes instead of double quotes", re.compile(r"'"), '"'),
    ("a trailing comma", re.compile(r",\s*([}\]])"), r"\1"),
    ("unquoted keys", re.compile(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)\s*:"), r'\1"\2":'),
)


def _near_miss(text: str) -> str | None:
    """What is wrong with a call's JSON when light repairs (quotes, commas, closing braces) make it
    read as a call; None when they do not."""
    text = _unfenced(text.strip())[:MAX_REPLY_CHARS]
    if not text.startswith("{"):
        return None
    faults = []
    for fault, pattern, replacement in _REPAIRS:
        repaired = pattern.sub(replacement, text)
        if repaired != text:
            faults.append(fault)
            text = repaired
    depth = text.count("{") - text.count("}")
    if 0 < depth <= 64:
        faults.append("unbalanced braces")
        text += "}" * depth
    try:
        value, _end = json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):
        return None
    return ", ".join(faults) if faults and isinstance(value, dict) and _looks_like_call(value) else None


def _bare_name(text: str, known: dict[str, dict[str, str]]) -> ParseResult | None:
    match = _BARE.fullmatch(text)
    if match is None or match.group(1) not in known:
        return None
    return ParseResult("bare_name", [ParsedCall(match.group(1), {}, raw=text)])


# -- helpers ----------------------------------------------------------------------------

_CALL_KEYS = frozenset(("tool", "name", "tool_name", "function", "action", "function_call", "tool_call"))


def _looks_like_call(value: dict[str, Any]) -> bool:
    return not _CALL_KEYS.isdisjoint(value)


def _from_object(value: Any, raw: Any) -> ParsedCall:
    """A call from a decoded JSON object, read by the tool layer's own ``parse_decision``."""
    try:
        decision = parse_decision(value)
    except ToolCallError as error:
        name = error.tool or (value.get("name") if isinstance(value, dict) and isinstance(value.get("name"), str)
                              else None)
        return ParsedCall(name, None, error=error.message, raw=_raw(raw))
    except RecursionError:
        return ParsedCall(None, None, error="the call is nested too deeply", raw=_raw(raw))
    return ParsedCall(decision.tool, decision.params, raw=_raw(raw))


def _first_json(text: str) -> tuple[Any, int]:
    """The JSON value at the start of ``text`` (after a fence), or (None, 0)."""
    text = _unfenced(text)
    try:
        return json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):
        return None, 0


def _unfenced(text: str) -> str:
    if text.startswith("```"):
        text = text[3:]
        newline = text.find("\n")
        text = text[newline + 1:] if newline >= 0 else ""
        if text.rstrip().endswith("```"):
            text = text.rstrip()[:-3]
    return text.strip()


def _guess_name(text: str) -> str | None:
    """The tool name of a call whose JSON is broken, when it can still be seen."""
    match = re.search(r'["\'](?:name|tool)["\']\s*:\s*["\']([A-Za-z_][A-Za-z0-9_.-]{0,63})["\']', text[:MAX_RAW_CHARS])
    return match.group(1) if match else None


def _raw(value: Any) -> str:
    if not isinstance(value, str):
        try:
            value = json.dumps(value)
        except (TypeError, ValueError, RecursionError):
            value = repr(value)[:MAX_RAW_CHARS]
    return value[:MAX_RAW_CHARS]
