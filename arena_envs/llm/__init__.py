"""LLM agents end to end: chat environments, tool-call parsers, model clients and the agent runner.

    from arena_envs.llm import ChatEnv, parse_reply

    env = ChatEnv("arena_envs/TreasureHunt-v0")
    messages, tools = env.reset(seed=0)
    new_messages, reward, terminated, truncated, info = env.step(model_reply)

``arena-agent`` (see :mod:`arena_envs.llm.cli`) runs any OpenAI-compatible endpoint over
seeded episodes and writes the transcripts.
"""

from arena_envs.llm.chat import (
    ChatBatch,
    ChatEnv,
    ChatOptions,
    ChatPool,
    ChatSession,
    ChatStep,
    assistant_message,
)
from arena_envs.llm.parsers import FORMATS, PARSE_STATUSES, ParsedCall, ParseResult, format_reply, parse_reply
from arena_envs.llm.transcripts import TranscriptError, validate_messages

__all__ = [
    "FORMATS",
    "PARSE_STATUSES",
    "ChatBatch",
    "ChatEnv",
    "ChatOptions",
    "ChatPool",
    "ChatSession",
    "ChatStep",
    "ParseResult",
    "ParsedCall",
    "TranscriptError",
    "assistant_message",
    "format_reply",
    "parse_reply",
    "validate_messages",
]
