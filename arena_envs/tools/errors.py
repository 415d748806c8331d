"""Error codes of the universal tools and the exception raised for a bad tool call.

The codes are the world's result codes (:data:`arena_envs.world.RESULT_CODES`, where the
core records them), so the two can never disagree; ``OK`` is the one that is not an error.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from arena_envs.observations import MAX_TEXT_CHARS, bounded_text
from arena_envs.world import OK, RESULT_CODES


class _CodeEnum(str, Enum):
    """Members compare equal to their names: ``ErrorCode.BUSY == "BUSY"``."""

    def __str__(self) -> str:
        return self.value


ErrorCode = _CodeEnum("ErrorCode", [(code, code) for i, code in enumerate(RESULT_CODES) if i != OK],
                      module=__name__, qualname="ErrorCode")
ErrorCode.__doc__ = "Why a tool call failed (the world's result codes but OK). ``ErrorCode.BUSY == \"BUSY\"``."


class ToolCallError(ValueError):
    """A tool call that cannot be carried out, with its error code and a message for the agent.

    ``field`` names the offending part of the call (``"tool"``, ``"params"`` or a parameter
    name) when there is one; ``tool`` names the tool when the call names one but its
    arguments can't be read (``parse_decision`` sets it), so a caller can still tell which
    tool failed. The message often quotes the model, so it is bounded and made encodable
    (see :func:`~arena_envs.observations.bounded_text`) before anyone sees it.
    """

    def __init__(
        self,
        message: str,
        code: ErrorCode | str = "INVALID_PARAMS",
        field: str | None = None,
        tool: str | None = None,
    ) -> None:
        message = bounded_text(message, MAX_TEXT_CHARS)
        super().__init__(message)
        self.message = message
        self.code = ErrorCode(code)
        self.field = None if field is None else bounded_text(field, 64)
        self.tool = None if tool is None else bounded_text(tool, 64)

    def to_dict(self) -> dict[str, Any]:
        """The failed ``last_action_result`` an observation reports for this error."""
        return {"success": False, "error_code": self.code.value, "error_message": self.message}
