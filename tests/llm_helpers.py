"""Shared helpers of the LLM tests: the OpenAI chat message schema and transcript checks."""

from __future__ import annotations

import copy

import jsonschema

_TEXT_PARTS = {"type": "array", "items": {"type": "object", "required": ["type", "text"],
                                          "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}}
_CONTENT = {"anyOf": [{"type": "string"}, _TEXT_PARTS]}
_TOOL_CALL = {
    "type": "object",
    "required": ["id", "type", "function"],
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "type": {"const": "function"},
        "function": {"type": "object", "required": ["name", "arguments"],
                     "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}}},
    },
}
CHAT_MESSAGE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "OpenAI chat completion request message",
    "oneOf": [
        {"type": "object", "required": ["role", "content"], "additionalProperties": False,
         "properties": {"role": {"const": "system"}, "content": _CONTENT, "name": {"type": "string"}}},
        {"type": "object", "required": ["role", "content"], "additionalProperties": False,
         "properties": {"role": {"const": "user"}, "content": _CONTENT, "name": {"type": "string"}}},
        {"type": "object", "required": ["role"], "additionalProperties": False,
         "properties": {"role": {"const": "assistant"}, "content": {"anyOf": [_CONTENT, {"type": "null"}]},
                        "name": {"type": "string"}, "reasoning_content": {"type": "string"},
                        "tool_calls": {"type": "array", "minItems": 1, "items": _TOOL_CALL}},
         "anyOf": [{"required": ["content"]}, {"required": ["tool_calls"]}]},
        {"type": "object", "required": ["role", "content", "tool_call_id"], "additionalProperties": False,
         "properties": {"role": {"const": "tool"}, "content": _CONTENT, "tool_call_id": {"type": "string"}}},
    ],
}
TRANSCRIPT_SCHEMA = {"type": "array", "items": CHAT_MESSAGE_SCHEMA, "minItems": 2}


def validate_transcript(messages: list[dict]) -> None:
    """Each message valid, system first, and every tool message answering a call of the assistant
    message before it (by its id, or the ``call_<turn>_<k>`` id of a call read from text)."""
    jsonschema.validate(messages, TRANSCRIPT_SCHEMA)
    assert messages[0]["role"] == "system" and messages[1]["role"] == "user"
    turn, expected = 0, set()
    for message in messages:
        if message["role"] == "assistant":
            turn += 1
            expected = {call["id"] for call in message.get("tool_calls", [])}
        elif message["role"] == "tool":
            call_id = message["tool_call_id"]
            assert call_id in expected or call_id.startswith(f"call_{turn}_"), (call_id, expected)


class PrefixChecker:
    """Asserts turn by turn that a transcript only grows: earlier messages never change."""

    def __init__(self, messages: list[dict]):
        self.seen = copy.deepcopy(messages)

    def check(self, messages: list[dict], new: list[dict]) -> None:
        assert len(messages) > len(self.seen)
        assert messages[:len(self.seen)] == self.seen, "an earlier message changed"
        assert messages[len(messages) - len(new):] == new, "the step's messages are not the transcript's tail"
        self.seen = copy.deepcopy(messages)
