"""Shared helpers of the LLM tests: the OpenAI chat message schema and transcript checks.

Every transcript an LLM test produces is checked twice: by the project's own
:func:`arena_envs.llm.validate_messages` and by the JSON schema below (jsonschema, outside
software, as the judge of the message shapes). Test modules that step chat sessions use
``pytestmark = pytest.mark.usefixtures("validated_sessions")`` so no step goes unchecked.
"""

from __future__ import annotations

import copy

import jsonschema
import pytest

from arena_envs.llm import validate_messages
from arena_envs.llm.chat import ChatSession

_TEXT_PARTS = {"type": "array", "items": {"type": "object", "required": ["type", "text"],
                                          "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}}
_CONTENT = {"anyOf": [{"type": "string"}, _TEXT_PARTS]}  # never null: llama.cpp's server refuses it
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
        {"type": "object", "required": ["role", "content"], "additionalProperties": False,
         "properties": {"role": {"const": "assistant"}, "content": _CONTENT,
                        "name": {"type": "string"}, "reasoning_content": {"type": "string"},
                        "tool_calls": {"type": "array", "minItems": 1, "items": _TOOL_CALL}}},
        {"type": "object", "required": ["role", "content", "tool_call_id"], "additionalProperties": False,
         "properties": {"role": {"const": "tool"}, "content": _CONTENT, "tool_call_id": {"type": "string"}}},
    ],
}
TRANSCRIPT_SCHEMA = {"type": "array", "items": CHAT_MESSAGE_SCHEMA, "minItems": 2}


def validate_transcript(messages: list[dict], null_content: bool = False) -> None:
    """The transcript valid by the project's validator and by the JSON schema, system message first
    (``null_content``: content null beside tool_calls allowed, as the session option)."""
    validate_messages(messages, null_content=null_content)
    if not null_content:
        jsonschema.validate(messages, TRANSCRIPT_SCHEMA)
    assert messages[0]["role"] == "system" and messages[1]["role"] == "user"


@pytest.fixture
def validated_sessions(monkeypatch):
    """Every ChatSession reset and step in the test checks the whole transcript afterwards."""
    reset, step = ChatSession.reset, ChatSession.step

    async def checked_reset(self, *args, **kwargs):
        opening = await reset(self, *args, **kwargs)
        validate_transcript(self.messages, self.options.null_content)
        return opening

    async def checked_step(self, *args, **kwargs):
        result = await step(self, *args, **kwargs)
        validate_transcript(self.messages, self.options.null_content)
        return result

    monkeypatch.setattr(ChatSession, "reset", checked_reset)
    monkeypatch.setattr(ChatSession, "step", checked_step)


class PrefixChecker:
    """Asserts turn by turn that a transcript only grows: earlier messages never change."""

    def __init__(self, messages: list[dict]):
        self.seen = copy.deepcopy(messages)

    def check(self, messages: list[dict], new: list[dict]) -> None:
        assert len(messages) > len(self.seen)
        assert messages[:len(self.seen)] == self.seen, "an earlier message changed"
        assert messages[len(messages) - len(new):] == new, "the step's messages are not the transcript's tail"
        self.seen = copy.deepcopy(messages)
