"""Error codes of the universal tools and the exception raised for a bad tool call."""

from __future__ import annotations

from enum import Enum
from typing import Any


class ErrorCode(str, Enum):
    """Why a tool call failed. Members compare equal to their names: ``ErrorCode.BUSY == "BUSY"``."""

    OUT_OF_RANGE = "OUT_OF_RANGE"
    NOT_FOUND = "NOT_FOUND"
    MISSING_MATERIALS = "MISSING_MATERIALS"
    INVALID_PARAMS = "INVALID_PARAMS"
    BUSY = "BUSY"
    INVENTORY_FULL = "INVENTORY_FULL"

    def __str__(self) -> str:
        return self.value


class ToolCallError(ValueError):
    """A tool call that cannot be carried out, with its error code and a message for the agent.

    ``field`` names the offending part of the call (``"tool"``, ``"params"`` or a parameter
    name) when there is one; ``tool`` names the tool when the call names one but its
    arguments can't be read (``parse_decision`` sets it), so a caller can still tell which
    tool failed.
    """

    def __init__(
        self,
        message: str,
        code: ErrorCode | str = ErrorCode.INVALID_PARAMS,
        field: str | None = None,
        tool: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = ErrorCode(code)
        self.field = field
        self.tool = tool

    def to_dict(self) -> dict[str, Any]:
        """The failed ``last_action_result`` an observation reports for this error."""
        return {"success": False, "error_code": self.code.value, "error_message": self.message}
