"""Tool declarations: each tool is written down once and both its JSON schema and its
parameter validation are read from that declaration.

``universal_tools(params)`` holds the seven tools shared by every 2D scenario, with the
bounds of a world of those params (``UNIVERSAL_TOOLS``: the default params). Other tool
sets are declared the same way::

    HUNT_TOOLS = ToolRegistry([
        ToolSpec("pwd", "Print the current directory."),
        ToolSpec("cd", "Change directory.", (Param("path", "string", "Where to go.", required=True),)),
    ])
"""

from __future__ import annotations

import copy
import math
import numbers
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from arena_envs.actions import min_speed
from arena_envs.observations import quoted_name, short_repr
from arena_envs.world import QUERY_FILTERS, WorldParams
from arena_envs.world import TOOL_NAMES as WORLD_TOOL_NAMES

from .errors import ToolCallError

SCALAR_TYPES = ("string", "number", "integer", "boolean")
_ABSENT = object()
JSON_TYPES = (*SCALAR_TYPES, "array")


def function_schema(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """Wrap a JSON Schema of parameters in the OpenAI function-calling format."""
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def json_type_name(value: Any) -> str:
    """The JSON name of a value's type, for messages addressed to a model."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, numbers.Number):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


def _show(value: Any) -> str:
    """The type and a short, bounded rendering of a value a model sent (it may be huge,
    deeply nested, circular or not encodable)."""
    return json_type_name(value) if value is None else f"{json_type_name(value)} {short_repr(value)}"


@dataclass(frozen=True)
class Param:
    """One parameter of a tool, in JSON Schema terms.

    A ``default`` of None means "no default": an omitted optional parameter is reported as
    None. ``shorthand_for`` makes an array parameter an alternative spelling of several
    required parameters (``target: [x, y, z]`` for ``target_x, target_y, target_z``);
    a call gives one form or the other, never both.
    """

    name: str
    type: str
    description: str
    required: bool = False
    default: Any = None
    minimum: float | None = None
    exclusive_minimum: float | None = None
    maximum: float | None = None
    exclusive_maximum: float | None = None
    enum: tuple[Any, ...] | None = None
    min_length: int | None = None
    items: str | None = None
    length: int | None = None
    shorthand_for: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.type not in JSON_TYPES:
            raise ValueError(f"param {self.name!r}: type must be one of {JSON_TYPES}")
        if self.required and self.default is not None:
            raise ValueError(f"param {self.name!r}: a required parameter has no default")
        if (self.type == "array") != (self.items in SCALAR_TYPES):
            raise ValueError(f"param {self.name!r}: arrays, and only arrays, have scalar items")
        if self.shorthand_for and self.length != len(self.shorthand_for):
            raise ValueError(f"param {self.name!r}: length must match shorthand_for")

    def schema(self) -> dict[str, Any]:
        """The JSON Schema of this parameter."""
        schema: dict[str, Any] = {"type": self.type, "description": self.description}
        if self.items is not None:
            schema["items"] = {"type": self.items}
        if self.length is not None:
            schema["minItems"] = schema["maxItems"] = self.length
        if self.min_length is not None:
            schema["minLength"] = self.min_length
        if self.enum is not None:
            schema["enum"] = list(self.enum)
        for keyword, bound in self._bounds:
            schema[keyword] = bound
        if self.default is not None:
            schema["default"] = self.default
        return schema

    def check(self, value: Any, tool: str, field: str | None = None) -> Any:
        """Return ``value`` normalized (numbers as float, arrays as list) or raise ToolCallError."""
        if self.type == "array":
            if self.items == "number" and type(value) is list and len(value) == self.length:
                numbers = _finite_floats(value)  # the common case, settled at once
                if numbers is not None:
                    return numbers
            return self._check_array(value, tool, field or self.name)
        field = field or self.name
        checked = _check_type(self.type, value, tool, field)
        if not self._constrained:
            return checked
        if self.min_length is not None and len(checked) < self.min_length:
            raise _error(tool, field, f"must have at least {self.min_length} character(s)", value)
        if self.enum is not None and checked not in self.enum:
            allowed = ", ".join(repr(option) for option in self.enum)
            raise _error(tool, field, f"must be one of {allowed}", value)
        for keyword, bound in self._bounds:
            if not _BOUND_TESTS[keyword](checked, bound):
                limits = " and ".join(f"{_BOUND_SIGNS[k]} {b:g}" for k, b in self._bounds)
                raise _error(tool, field, f"must be {limits}", value)
        return checked

    def _check_array(self, value: Any, tool: str, field: str) -> list[Any]:
        if type(value) is not list and hasattr(value, "tolist") and getattr(value, "ndim", None) == 1:
            value = value.tolist()  # a numpy (or similar) vector
        if not isinstance(value, (list, tuple)):
            raise _error(tool, field, "must be an array", value)
        if self.length is not None and len(value) != self.length:
            raise _error(tool, field, f"must have exactly {self.length} items", value)
        return [_check_type(self.items, item, tool, field, index) for index, item in enumerate(value)]

    @cached_property
    def _constrained(self) -> bool:
        """Whether a value of the right type can still be refused (length, enum or bounds)."""
        return self.min_length is not None or self.enum is not None or bool(self._bounds)

    @cached_property
    def _bounds(self) -> list[tuple[str, float]]:
        bounds = {
            "minimum": self.minimum,
            "exclusiveMinimum": self.exclusive_minimum,
            "maximum": self.maximum,
            "exclusiveMaximum": self.exclusive_maximum,
        }
        return [(keyword, bound) for keyword, bound in bounds.items() if bound is not None]


_BOUND_TESTS = {
    "minimum": lambda value, bound: value >= bound,
    "exclusiveMinimum": lambda value, bound: value > bound,
    "maximum": lambda value, bound: value <= bound,
    "exclusiveMaximum": lambda value, bound: value < bound,
}
_BOUND_SIGNS = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}


def _error(tool: str, field: str, problem: str, value: Any) -> ToolCallError:
    return ToolCallError(f"{tool}: '{field}' {problem}, got {_show(value)}", field=field)


_ARTICLES = {"number": "a number", "integer": "an integer", "string": "a string", "boolean": "a boolean"}


def _check_type(json_type: str | None, value: Any, tool: str, field: str, index: int | None = None) -> Any:
    """``value`` normalized for ``json_type``, or ToolCallError naming ``field`` (``field[index]``
    for an array item: the name is only built for the message, as this runs on every call)."""
    if json_type in ("number", "integer"):
        kind = type(value)
        # plain floats and ints skip the slower abstract-class checks (bool is neither)
        if kind is not float and kind is not int and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            raise _error(tool, _item(field, index), f"must be {_ARTICLES[json_type]}", value)
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise _error(tool, _item(field, index), "must be a finite number", value)
        if json_type == "integer":
            if not number.is_integer():
                raise _error(tool, _item(field, index), "must be an integer", value)
            return int(value)
        return number
    if json_type == "string" and not isinstance(value, str):
        raise _error(tool, _item(field, index), "must be a string", value)
    if json_type == "boolean" and not isinstance(value, bool):
        raise _error(tool, _item(field, index), "must be a boolean", value)
    return value


_PLAIN_NUMBER_TYPES = frozenset((float, int))


def _finite_floats(values: list[Any]) -> list[float] | None:
    """``values`` as floats when every one is a plain finite float or int, else None (and
    :func:`_check_type`, item by item, says what is wrong)."""
    if not _PLAIN_NUMBER_TYPES.issuperset(map(type, values)):
        return None
    try:
        numbers = list(map(float, values))
    except OverflowError:  # an int too large for a float
        return None
    # NaN or an infinity makes the sum non-finite; so can a sum of huge finite values,
    # which then merely takes the item-by-item path
    return numbers if math.isfinite(sum(numbers)) else None


def _item(field: str, index: int | None) -> str:
    return field if index is None else f"{field}[{index}]"


@dataclass(frozen=True)
class ToolSpec:
    """A tool: its name, what it does, and its parameters."""

    name: str
    description: str
    params: tuple[Param, ...] = ()

    def __post_init__(self) -> None:
        by_name = {param.name: param for param in self.params}
        if len(by_name) != len(self.params):
            raise ValueError(f"tool {self.name!r}: parameter names must be unique")
        for shorthand in self._shorthands:
            for target in shorthand.shorthand_for:
                param = by_name.get(target)
                if param is None or not param.required or param.type != shorthand.items:
                    raise ValueError(
                        f"tool {self.name!r}: {shorthand.name!r} must stand for required "
                        f"{shorthand.items} parameters, and {target!r} is not one"
                    )

    @property
    def schema(self) -> dict[str, Any]:
        """This tool in the OpenAI function-calling format."""
        covered = {name for shorthand in self._shorthands for name in shorthand.shorthand_for}
        parameters: dict[str, Any] = {
            "type": "object",
            "properties": {param.name: param.schema() for param in self.params},
            "required": [p.name for p in self.params if p.required and p.name not in covered],
            "additionalProperties": False,
        }
        forms = [
            [
                {"required": list(s.shorthand_for), "properties": {s.name: False}},
                {"required": [s.name], "properties": {n: False for n in s.shorthand_for}},
            ]
            for s in self._shorthands
        ]
        if len(forms) == 1:
            parameters["oneOf"] = forms[0]
        elif forms:
            parameters["allOf"] = [{"oneOf": form} for form in forms]
        return function_schema(self.name, self.description, parameters)

    def validate(self, params: Any) -> dict[str, Any]:
        """Check a call's parameters; return them normalized with every parameter present.

        Shorthand arrays are expanded (``target`` becomes ``target_x``, ``target_y``,
        ``target_z``), defaults are filled in and omitted optional parameters are None.
        (This runs on every tool call, so it tests the common case first.)
        """
        if type(params) is not dict and not isinstance(params, Mapping):
            raise ToolCallError(
                f"{self.name}: params must be a JSON object, got {json_type_name(params)}",
                field="params",
            )
        known, shorthands, plain = self._plan
        if not known.issuperset(params):
            key = next(key for key in params if key not in known)
            expected = ", ".join(sorted(known)) or "none"
            raise ToolCallError(f"{self.name}: unknown parameter {quoted_name(key)} (parameters: {expected})",
                                field=key if isinstance(key, str) else short_repr(key))
        normalized: dict[str, Any] = {}  # expanded shorthands first: an array's items are already checked
        for name, targets, target_set, check in shorthands:
            value = params.get(name, _ABSENT)
            if value is _ABSENT or value is None:  # null: as if it were not given
                continue
            if not target_set.isdisjoint(params) and any(params.get(target) is not None for target in targets):
                raise ToolCallError(f"{self.name}: give either '{name}' or {_quoted(targets)}, not both", field=name)
            normalized.update(zip(targets, check(value, self.name), strict=True))
        for name, check, constrained, required, default in plain:
            if name in normalized:
                if constrained:
                    normalized[name] = check(normalized[name], self.name)
            elif name in params and (required or params[name] is not None):  # null means the default
                normalized[name] = check(params[name], self.name)
            elif required:
                raise ToolCallError(self._missing_message(name), field=name)
            else:
                normalized[name] = default
        return normalized

    @cached_property
    def _plan(self) -> tuple[frozenset[str], tuple, tuple]:
        """What :meth:`validate` needs, gathered once: the parameter names, ``(name, targets,
        targets as a set, check)`` of each shorthand and ``(name, check, constrained, required, default)`` of
        every other parameter, in declaration order."""
        shorthands = tuple((p.name, p.shorthand_for, frozenset(p.shorthand_for), p.check)
                           for p in self.params if p.shorthand_for)
        plain = tuple((p.name, p.check, p._constrained, p.required, p.default)
                      for p in self.params if not p.shorthand_for)
        return frozenset(p.name for p in self.params), shorthands, plain

    @cached_property
    def _shorthands(self) -> list[Param]:
        return [param for param in self.params if param.shorthand_for]

    def _missing_message(self, name: str) -> str:
        message = f"{self.name}: missing required parameter '{name}'"
        for shorthand in self._shorthands:
            if name in shorthand.shorthand_for:
                message += f" (or give '{shorthand.name}': [{', '.join(shorthand.shorthand_for)}])"
        return message


def _quoted(names: Iterable[str]) -> str:
    return ", ".join(f"'{name}'" for name in names)


class ToolRegistry(Mapping[str, ToolSpec]):
    """An ordered set of tools, looked up by name."""

    def __init__(self, tools: Iterable[ToolSpec]) -> None:
        self._tools: dict[str, ToolSpec] = {}
        for spec in tools:
            if spec.name in self._tools:
                raise ValueError(f"tool {spec.name!r} is declared twice")
            self._tools[spec.name] = spec

    def __getitem__(self, name: str) -> ToolSpec:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> tuple[str, ...]:
        """Tool names in declaration order."""
        return tuple(self._tools)

    def spec(self, name: Any) -> ToolSpec:
        """The tool called ``name``; ToolCallError if there is none."""
        if not isinstance(name, str):
            raise ToolCallError(f"tool name must be a string, got {json_type_name(name)}", field="tool")
        if name not in self._tools:
            raise ToolCallError(
                f"unknown tool {quoted_name(name)}; available tools: {', '.join(self._tools)}",
                field="tool",
            )
        return self._tools[name]

    def schemas(self, names: str | Iterable[str] | None = None) -> list[dict[str, Any]]:
        """OpenAI function-calling schemas of the named tools (all of them by default)."""
        if names is None:
            names = self.names
        elif isinstance(names, str):
            names = [names]
        return [copy.deepcopy(self.spec(name).schema) for name in names]

    def validate(self, tool: Any, params: Any) -> dict[str, Any]:
        """Validate and normalize the parameters of a call to ``tool`` (see ToolSpec.validate)."""
        return self.spec(tool).validate(params)


def _name_param(name: str, description: str, **options: Any) -> Param:
    return Param(name, "string", description, min_length=1, **options)


def _declarations(p: WorldParams) -> dict[str, ToolSpec]:
    """Every universal tool, its bounds and the numbers in its description read from ``p``."""
    w, top, slowest = p.half_size, p.max_speed_multiplier, min_speed(p)
    return {
        "move_to": ToolSpec(
            "move_to",
            "Start walking toward a point on the ground. The agent keeps moving on later ticks, "
            "steering around obstacles, until it arrives or another move_to or idle replaces the "
            "order. Give the point as target_x, target_y, target_z or as target: [x, y, z]; "
            f"y is ignored because the world is flat. The world spans -{w:g} to {w:g} on x and z: "
            "a target beyond its edge is moved onto the edge.",
            (
                Param("target_x", "number", "X coordinate of the destination.", required=True),
                Param("target_y", "number", "Y coordinate (height); ignored.", required=True),
                Param("target_z", "number", "Z coordinate of the destination.", required=True),
                Param(
                    "target",
                    "array",
                    "The destination as [x, y, z], instead of target_x, target_y, target_z.",
                    items="number",
                    length=3,
                    shorthand_for=("target_x", "target_y", "target_z"),
                ),
                Param(
                    "speed",
                    "number",
                    f"Speed multiplier from {slowest:g} to {top:g}: 1.0 walks {p.move_speed:g} units per "
                    "second; faster drains energy.",
                    default=1.0,
                    minimum=slowest,
                    maximum=top,
                ),
            ),
        ),
        "collect": ToolSpec(
            "collect",
            "Pick up a resource by name (for example Berry1) and put it in the inventory. "
            f"It must be within collection range ({p.collect_range:g} units): move_to it first.",
            (_name_param("target_name", "Name of the resource to pick up.", required=True),),
        ),
        "craft": ToolSpec(
            "craft",
            "Make an item from inventory materials at a crafting station, for example "
            f"iron_ingot at Furnace1. Stand within {p.craft_range:g} units of a station of the recipe's "
            "type. Materials are used up at once and the item arrives after the recipe's crafting "
            "time; the agent is busy until then.",
            (
                _name_param("item_name", "Recipe to make, e.g. iron_ingot.", required=True),
                _name_param("station_name", "Station to use, e.g. Furnace1.", required=True),
            ),
        ),
        "query_world": ToolSpec(
            "query_world",
            "List every entity within a radius, seen or not, optionally of one kind only. "
            "The list arrives in the next observation as query_result.",
            (
                Param(
                    "radius",
                    "number",
                    f"Search radius in world units, at most {p.query_radius_max:g}.",
                    default=float(p.query_radius_default),
                    exclusive_minimum=0.0,
                    maximum=p.query_radius_max,
                ),
                Param(
                    "filter_type",
                    "string",
                    "Only report entities of this kind; omit it to report all kinds.",
                    enum=QUERY_FILTERS[1:],  # the first, "all", is what omitting it means
                ),
            ),
        ),
        "query_inventory": ToolSpec(
            "query_inventory",
            "Report the inventory in detail (items with counts and types, capacity, space "
            "used) in the next observation as inventory_details.",
        ),
        "send_message": ToolSpec(
            "send_message",
            "Send a text message to teammates in communication range. It is delivered on the "
            "next tick and may be lost on the way.",
            (
                _name_param("message", "The text to send.", required=True),
                _name_param(
                    "target_agent",
                    'Agent to send it to, or "all" for every teammate in range.',
                    default="all",
                ),
            ),
        ),
        "idle": ToolSpec("idle", "Do nothing this tick and stop any movement in progress."),
    }


_REGISTRIES: dict[tuple, ToolRegistry] = {}


def universal_tools(params: WorldParams | None = None) -> ToolRegistry:
    """The universal tools of a world with ``params`` (the defaults when None).

    Their names and order are the world's (:data:`arena_envs.world.TOOL_NAMES`, the
    structured action's ``tool`` index); their bounds (speed, query radius) and the
    numbers in their descriptions and error messages come from ``params``, so a
    scenario built with other params gets schemas and validation that match it.
    """
    p = params if params is not None else WorldParams()
    key = (p.half_size, p.move_speed, p.max_speed_multiplier, min_speed(p), p.collect_range, p.craft_range,
           p.query_radius_default, p.query_radius_max)
    registry = _REGISTRIES.get(key)
    if registry is None:
        declared = _declarations(p)
        if tuple(declared) != WORLD_TOOL_NAMES:
            raise RuntimeError(f"the registry declares {tuple(declared)}, the world has {WORLD_TOOL_NAMES}")
        registry = _REGISTRIES[key] = ToolRegistry(declared.values())
    return registry


UNIVERSAL_TOOLS = universal_tools()
"""The universal tools with the default :class:`~arena_envs.world.WorldParams`."""

TOOL_NAMES: tuple[str, ...] = WORLD_TOOL_NAMES
"""The universal tools in order; the structured Gymnasium action uses the index in this tuple."""


def tool_schemas(names: str | Iterable[str] | None = None, params: WorldParams | None = None) -> list[dict[str, Any]]:
    """OpenAI function-calling schemas of the universal tools (all seven by default) for a
    world with ``params`` (a scenario's ``params``; the defaults when None)."""
    return universal_tools(params).schemas(names)


def validate_params(tool: Any, params: Any, world: WorldParams | None = None) -> dict[str, Any]:
    """Validate a call to a universal tool and return its normalized parameters.

    ``move_to`` always comes back as floats ``target_x``, ``target_y``, ``target_z`` and
    ``speed``; defaults are filled in (``null`` for an optional parameter means its
    default). Bounds are those of a world with ``world`` params (defaults when None).
    Raises ToolCallError (code INVALID_PARAMS) naming the bad field.
    """
    return universal_tools(world).validate(tool, params)
