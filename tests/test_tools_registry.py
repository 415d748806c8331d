"""The universal tool registry: schemas, validation, and their agreement."""

import json
import math

import jsonschema
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from arena_envs.tools import (
    TOOL_NAMES,
    UNIVERSAL_TOOLS,
    ErrorCode,
    Param,
    ToolCallError,
    ToolRegistry,
    ToolSpec,
    tool_schemas,
    validate_params,
)

# The envelope OpenAI expects around each function's parameter schema.
OPENAI_TOOL = {
    "type": "object",
    "required": ["type", "function"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "function"},
        "function": {
            "type": "object",
            "required": ["name", "description", "parameters"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                "description": {"type": "string", "minLength": 1},
                "parameters": {
                    "type": "object",
                    "required": ["type", "properties"],
                    "properties": {"type": {"const": "object"}},
                },
            },
        },
    },
}


VALIDATORS = {
    schema["function"]["name"]: jsonschema.Draft202012Validator(schema["function"]["parameters"])
    for schema in tool_schemas()
}


def params_validator(tool):
    return VALIDATORS[tool]


def accepted(tool, params):
    try:
        validate_params(tool, params)
    except ToolCallError:
        return False
    return True


# --- the registry and its schemas --------------------------------------------------------


def test_tool_names_in_contract_order():
    assert TOOL_NAMES == ("move_to", "collect", "craft", "query_world", "query_inventory", "send_message", "idle")
    assert tuple(UNIVERSAL_TOOLS) == TOOL_NAMES


def test_schemas_are_valid_json_schema_in_openai_format():
    schemas = tool_schemas()
    assert [s["function"]["name"] for s in schemas] == list(TOOL_NAMES)
    for schema in schemas:
        jsonschema.validate(schema, OPENAI_TOOL)
        jsonschema.Draft202012Validator.check_schema(schema["function"]["parameters"])
        assert json.loads(json.dumps(schema)) == schema


def test_schemas_of_a_subset_keep_the_requested_order():
    assert [s["function"]["name"] for s in tool_schemas(["idle", "collect"])] == ["idle", "collect"]
    assert [s["function"]["name"] for s in tool_schemas("craft")] == ["craft"]


def test_schemas_of_an_unknown_tool_raise():
    with pytest.raises(ToolCallError, match="fly"):
        tool_schemas(["move_to", "fly"])


def test_schemas_are_fresh_copies():
    tool_schemas()[0]["function"]["parameters"]["properties"].clear()
    assert "speed" in tool_schemas()[0]["function"]["parameters"]["properties"]


def test_schemas_carry_defaults_bounds_and_enums():
    params = {s["function"]["name"]: s["function"]["parameters"] for s in tool_schemas()}
    speed = params["move_to"]["properties"]["speed"]
    # the slowest speed is a floor read from the world's params (see arena_envs.actions.min_speed)
    assert (speed["default"], speed["minimum"], speed["maximum"]) == (1.0, 0.002, 2)
    radius = params["query_world"]["properties"]["radius"]
    assert (radius["default"], radius["maximum"]) == (20, 50)
    assert params["query_world"]["properties"]["filter_type"]["enum"] == ["resource", "hazard", "agent", "station"]
    assert params["send_message"]["properties"]["target_agent"]["default"] == "all"
    assert params["send_message"]["required"] == ["message"]
    assert params["craft"]["required"] == ["item_name", "station_name"]
    assert params["collect"]["required"] == ["target_name"]
    assert params["query_inventory"]["properties"] == params["idle"]["properties"] == {}
    assert set(params["move_to"]["properties"]) == {"target_x", "target_y", "target_z", "target", "speed"}
    assert all(p["additionalProperties"] is False for p in params.values())


# --- normalized parameters ----------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        {"target_x": 12, "target_y": 0, "target_z": 6},
        {"target": [12.0, 0.0, 6.0]},
        {"target": (12, 0, 6), "speed": 1.0},
        {"target": np.array([12.0, 0.0, 6.0], dtype=np.float32)},
        {"target_x": np.float32(12), "target_y": np.int64(0), "target_z": 6.0},
    ],
)
def test_move_to_forms_normalize_to_floats(params):
    normalized = validate_params("move_to", params)
    assert normalized == {"target_x": 12.0, "target_y": 0.0, "target_z": 6.0, "speed": 1.0}
    assert all(type(value) is float for value in normalized.values())


def test_defaults_are_filled():
    assert validate_params("move_to", {"target": [1, 0, 2], "speed": 2})["speed"] == 2.0
    assert validate_params("query_world", {}) == {"radius": 20.0, "filter_type": None}
    assert validate_params("query_world", {"radius": 50, "filter_type": "agent"}) == {
        "radius": 50.0,
        "filter_type": "agent",
    }
    assert validate_params("send_message", {"message": "hi"}) == {"message": "hi", "target_agent": "all"}
    assert validate_params("collect", {"target_name": "Berry1"}) == {"target_name": "Berry1"}
    assert validate_params("craft", {"item_name": "iron_ingot", "station_name": "Furnace1"}) == {
        "item_name": "iron_ingot",
        "station_name": "Furnace1",
    }
    assert validate_params("query_inventory", {}) == {}
    assert validate_params("idle", {}) == {}


def test_validation_does_not_modify_the_input():
    params = {"target": [1, 0, 2]}
    validate_params("move_to", params)
    assert params == {"target": [1, 0, 2]}


# --- bad parameters: every tool -----------------------------------------------------------

NAN, INF = float("nan"), float("inf")

BAD_CALLS = [
    # (tool, params, the field the error names)
    ("move_to", {}, "target_x"),
    ("move_to", {"target_x": 1, "target_y": 0}, "target_z"),
    ("move_to", {"target_y": 0, "target_z": 1}, "target_x"),
    ("move_to", {"target": [1, 2]}, "target"),
    ("move_to", {"target": [1, 2, 3, 4]}, "target"),
    ("move_to", {"target": "1,0,2"}, "target"),
    ("move_to", {"target": {"x": 1}}, "target"),
    ("move_to", {"target": [1, "0", 2]}, "target[1]"),
    ("move_to", {"target": [1, 0, True]}, "target[2]"),
    ("move_to", {"target": [NAN, 0, 2]}, "target[0]"),
    ("move_to", {"target": [1, 0, INF]}, "target[2]"),
    ("move_to", {"target": [1, 0, 2], "target_x": 1}, "target"),
    ("move_to", {"target": [1, 0, 2], "target_x": 1, "target_y": 0, "target_z": 2}, "target"),
    ("move_to", {"target_x": NAN, "target_y": 0, "target_z": 0}, "target_x"),
    ("move_to", {"target_x": 0, "target_y": -INF, "target_z": 0}, "target_y"),
    ("move_to", {"target_x": 0, "target_y": 0, "target_z": INF}, "target_z"),
    ("move_to", {"target_x": 10**400, "target_y": 0, "target_z": 0}, "target_x"),
    ("move_to", {"target_x": "1", "target_y": 0, "target_z": 0}, "target_x"),
    ("move_to", {"target_x": True, "target_y": 0, "target_z": 0}, "target_x"),
    ("move_to", {"target_x": None, "target_y": 0, "target_z": 0}, "target_x"),
    ("move_to", {"target_x": [1], "target_y": 0, "target_z": 0}, "target_x"),
    ("move_to", {"target": [1, 0, 2], "speed": 0}, "speed"),
    ("move_to", {"target": [1, 0, 2], "speed": -1}, "speed"),
    ("move_to", {"target": [1, 0, 2], "speed": 2.0001}, "speed"),
    ("move_to", {"target": [1, 0, 2], "speed": NAN}, "speed"),
    ("move_to", {"target": [1, 0, 2], "speed": "fast"}, "speed"),
    ("move_to", {"target": [1, 0, 2], "sped": 1}, "sped"),
    ("move_to", {"target": None}, "target_x"),  # null for the shorthand: as if absent, so target_x is missing
    ("collect", {}, "target_name"),
    ("collect", {"target_name": ""}, "target_name"),
    ("collect", {"target_name": 5}, "target_name"),
    ("collect", {"target_name": None}, "target_name"),
    ("collect", {"target_name": ["Berry1"]}, "target_name"),
    ("collect", {"target_name": "Berry1", "count": 2}, "count"),
    ("craft", {}, "item_name"),
    ("craft", {"item_name": "iron_ingot"}, "station_name"),
    ("craft", {"station_name": "Furnace1"}, "item_name"),
    ("craft", {"item_name": 1, "station_name": "Furnace1"}, "item_name"),
    ("craft", {"item_name": "iron_ingot", "station_name": ""}, "station_name"),
    ("craft", {"item_name": "iron_ingot", "station_name": "Furnace1", "amount": 1}, "amount"),
    ("query_world", {"radius": 0}, "radius"),
    ("query_world", {"radius": -5}, "radius"),
    ("query_world", {"radius": 50.5}, "radius"),
    ("query_world", {"radius": INF}, "radius"),
    ("query_world", {"radius": NAN}, "radius"),
    ("query_world", {"radius": "20"}, "radius"),
    ("query_world", {"radius": False}, "radius"),
    ("query_world", {"filter_type": "tree"}, "filter_type"),
    ("query_world", {"filter_type": "Resource"}, "filter_type"),
    ("query_world", {"filter_type": 1}, "filter_type"),
    ("query_world", {"filter": "resource"}, "filter"),
    ("query_inventory", {"verbose": True}, "verbose"),
    ("send_message", {}, "message"),
    ("send_message", {"message": ""}, "message"),
    ("send_message", {"message": 42}, "message"),
    ("send_message", {"target_agent": "all"}, "message"),
    ("send_message", {"message": "hi", "target_agent": 2}, "target_agent"),
    ("send_message", {"message": "hi", "target_agent": ""}, "target_agent"),
    ("send_message", {"message": "hi", "to": "all"}, "to"),
    ("idle", {"seconds": 3}, "seconds"),
]


@pytest.mark.parametrize(("tool", "params", "field"), BAD_CALLS)
def test_bad_parameters_raise_invalid_params_naming_the_field(tool, params, field):
    with pytest.raises(ToolCallError) as caught:
        validate_params(tool, params)
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.code == ErrorCode.INVALID_PARAMS == "INVALID_PARAMS"
    assert error.field == field
    assert f"'{field}'" in error.message
    assert error.message.startswith(f"{tool}:")


@pytest.mark.parametrize("tool", TOOL_NAMES)
@pytest.mark.parametrize("params", [None, [], ["target_name"], "{}", 5, ("a", 1)])
def test_params_that_are_not_an_object_raise(tool, params):
    with pytest.raises(ToolCallError, match="params must be a JSON object") as caught:
        validate_params(tool, params)
    assert caught.value.field == "params"


@pytest.mark.parametrize("tool", ["fly", "Move_To", "", None, 3, ["idle"]])
def test_unknown_tools_raise(tool):
    with pytest.raises(ToolCallError) as caught:
        validate_params(tool, {})
    assert caught.value.field == "tool"
    assert caught.value.code == ErrorCode.INVALID_PARAMS


def test_unknown_tool_message_lists_the_tools():
    with pytest.raises(ToolCallError, match="unknown tool 'fly'; available tools: move_to, collect"):
        validate_params("fly", {})


def test_range_errors_state_the_limits_and_the_value():
    with pytest.raises(ToolCallError, match=r"'speed' must be >= 0.002 and <= 2, got number 3"):
        validate_params("move_to", {"target": [0, 0, 0], "speed": 3})
    with pytest.raises(ToolCallError, match=r"'radius' must be > 0 and <= 50"):
        validate_params("query_world", {"radius": 51})


def test_limits_themselves_are_accepted():
    assert validate_params("move_to", {"target": [0, 0, 0], "speed": 2})["speed"] == 2.0
    assert validate_params("move_to", {"target": [0, 0, 0], "speed": 0.002})["speed"] == 0.002
    assert validate_params("query_world", {"radius": 50})["radius"] == 50.0


# --- the schema and the validator agree ---------------------------------------------------

GOOD_CALLS = [
    ("move_to", {"target_x": 1, "target_y": 0, "target_z": -3.5}),
    ("move_to", {"target": [1, 0, -3.5], "speed": 2}),
    ("move_to", {"target": [0, 0, 0], "speed": 0.25}),
    ("collect", {"target_name": "Berry1"}),
    ("craft", {"item_name": "iron_sword", "station_name": "Anvil1"}),
    ("query_world", {}),
    ("query_world", {"radius": 30.0, "filter_type": "station"}),
    ("query_inventory", {}),
    ("send_message", {"message": "I'm capturing point A", "target_agent": "blue_agent_2"}),
    ("idle", {}),
]


def _json_can_carry(params):
    """No NaN, no infinity, no integer beyond what JSON parsers keep exact."""
    try:
        json.dumps(params, allow_nan=False)
    except ValueError:
        return False
    return all(not isinstance(value, int) or abs(value) <= 2**53 for value in params.values())


def _agreement_cases():
    cases = [(tool, params, True) for tool, params in GOOD_CALLS]
    cases += [(tool, params, False) for tool, params, _ in BAD_CALLS if _json_can_carry(params)]
    return cases


@pytest.mark.parametrize(("tool", "params", "valid"), _agreement_cases())
def test_schema_and_validator_agree_on_the_examples(tool, params, valid):
    assert params_validator(tool).is_valid(params) is valid
    assert accepted(tool, params) is valid


def test_the_agreement_examples_cover_both_outcomes_for_every_tool():
    cases = _agreement_cases()
    for tool in TOOL_NAMES:
        assert {valid for name, _, valid in cases if name == tool} == {True, False}


VALUES = st.one_of(
    st.sampled_from(["Berry1", "station", "agent", 0.5, 1, 1.5, 25, [1, 0, 2], [0.5, 0, -3]]),
    st.none(),
    st.booleans(),
    st.sampled_from([0, 0.0, -0.0, 1, 2, 2.0, 2.5, 50, 50.0, 51, -1, 1e-9, 2**53]),
    st.floats(-100, 100),
    st.sampled_from(["", "Berry1", "all", "resource", "hazard", "Resource", "1.5"]),
    st.lists(st.one_of(st.floats(-10, 10), st.sampled_from([0, -2, "1", None, True])), max_size=4),
    st.dictionaries(st.sampled_from(["x", "y"]), st.integers(0, 3), max_size=2),
)


@st.composite
def mutated_calls(draw):
    """A good call with perhaps a parameter dropped and perhaps one set to some JSON value."""
    tool, params = draw(st.sampled_from(GOOD_CALLS))
    params = dict(params)
    if params and draw(st.integers(0, 3)) == 3:
        del params[draw(st.sampled_from(sorted(params)))]
    if draw(st.booleans()):
        fields = [*params_validator(tool).schema["properties"], "other"]
        params[draw(st.sampled_from(fields))] = draw(VALUES)
    return tool, params


@given(mutated_calls())
def test_schema_and_validator_agree_on_generated_params(call):
    """The schema states the canonical form; the validator also reads ``null`` as "not given"
    for an optional parameter (what strict-mode models send), so nulls of optional
    parameters are compared as absent."""
    tool, params = call
    spec = UNIVERSAL_TOOLS[tool]
    optional = {p.name for p in spec.params if not p.required or p.name in _covered(spec)}
    canonical = {k: v for k, v in params.items() if not (v is None and k in optional)}
    assert params_validator(tool).is_valid(canonical) is accepted(tool, params)


def _covered(spec):
    """Required parameters a shorthand may stand for (target_x for target)."""
    return {name for p in spec.params for name in p.shorthand_for}


@given(
    x=st.floats(allow_nan=False, allow_infinity=False),
    z=st.floats(allow_nan=False, allow_infinity=False),
    speed=st.floats(min_value=0.002, max_value=2),
)
def test_both_move_to_forms_normalize_alike(x, z, speed):
    long_form = validate_params("move_to", {"target_x": x, "target_y": 0, "target_z": z, "speed": speed})
    assert validate_params("move_to", {"target": [x, 0, z], "speed": speed}) == long_form
    assert long_form == {"target_x": x, "target_y": 0.0, "target_z": z, "speed": speed}


# --- error codes ---------------------------------------------------------------------------


def test_error_codes_match_the_seed():
    assert [code.value for code in ErrorCode] == [
        "OUT_OF_RANGE",
        "NOT_FOUND",
        "MISSING_MATERIALS",
        "INVALID_PARAMS",
        "BUSY",
        "INVENTORY_FULL",
    ]
    assert ErrorCode.OUT_OF_RANGE == "OUT_OF_RANGE"
    assert str(ErrorCode.BUSY) == f"{ErrorCode.BUSY}" == "BUSY"
    assert ErrorCode("NOT_FOUND") is ErrorCode.NOT_FOUND


def test_tool_call_error_carries_code_field_and_result():
    error = ToolCallError("Target 'Berry1' is 5.2 units away, collection range is 2.0", "OUT_OF_RANGE")
    assert error.code is ErrorCode.OUT_OF_RANGE
    assert error.field is None
    assert str(error) == error.message
    assert error.to_dict() == {
        "success": False,
        "error_code": "OUT_OF_RANGE",
        "error_message": "Target 'Berry1' is 5.2 units away, collection range is 2.0",
    }
    assert ToolCallError("bad").code is ErrorCode.INVALID_PARAMS
    with pytest.raises(ValueError):
        ToolCallError("bad", code="ON_FIRE")


# --- other tool sets ------------------------------------------------------------------------

HUNT_TOOLS = ToolRegistry(
    [
        ToolSpec("pwd", "Print the current directory."),
        ToolSpec("cd", "Change directory.", (Param("path", "string", "Where to go.", required=True),)),
        ToolSpec("ls", "List a directory.", (Param("path", "string", "Directory; the current one if omitted."),)),
        ToolSpec(
            "check_treasure",
            "Submit the key.",
            (Param("key", "string", "The 16-character key.", required=True, min_length=16),),
        ),
    ]
)


def test_other_tool_sets_are_declared_the_same_way():
    assert HUNT_TOOLS.names == ("pwd", "cd", "ls", "check_treasure")
    for schema in HUNT_TOOLS.schemas():
        jsonschema.validate(schema, OPENAI_TOOL)
        jsonschema.Draft202012Validator.check_schema(schema["function"]["parameters"])
    assert HUNT_TOOLS.validate("ls", {}) == {"path": None}
    assert HUNT_TOOLS.validate("cd", {"path": "./a"}) == {"path": "./a"}
    with pytest.raises(ToolCallError, match="'key'"):
        HUNT_TOOLS.validate("check_treasure", {"key": "short"})
    with pytest.raises(ToolCallError, match="unknown tool 'move_to'"):
        HUNT_TOOLS.validate("move_to", {"target": [0, 0, 0]})
    assert "cd" not in UNIVERSAL_TOOLS and "move_to" not in HUNT_TOOLS


def test_integer_and_boolean_parameters():
    registry = ToolRegistry(
        [
            ToolSpec(
                "pick",
                "Pick slots.",
                (
                    Param("slot", "integer", "Slot.", required=True, minimum=0, exclusive_maximum=8),
                    Param("all", "boolean", "Every slot."),
                ),
            )
        ]
    )
    assert registry.validate("pick", {"slot": 3.0}) == {"slot": 3, "all": None}
    assert type(registry.validate("pick", {"slot": 7})["slot"]) is int
    validator = jsonschema.Draft202012Validator(registry.schemas()[0]["function"]["parameters"])
    for params in [{"slot": 8}, {"slot": -1}, {"slot": 2.5}, {"slot": True}, {"slot": 1, "all": 1}]:
        assert not validator.is_valid(params)
        with pytest.raises(ToolCallError):
            registry.validate("pick", params)
    assert validator.is_valid({"slot": 0, "all": False})
    assert registry.validate("pick", {"slot": 0, "all": False}) == {"slot": 0, "all": False}


@pytest.mark.parametrize(
    "declare",
    [
        lambda: Param("x", "float", "Not a JSON type."),
        lambda: Param("x", "number", "Required with a default.", required=True, default=1.0),
        lambda: Param("x", "array", "Array without items."),
        lambda: Param("x", "string", "Items on a string.", items="string"),
        lambda: Param("x", "array", "Wrong length.", items="number", length=2, shorthand_for=("a", "b", "c")),
        lambda: ToolSpec("t", "Twice.", (Param("a", "string", "A."), Param("a", "string", "A."))),
        lambda: ToolSpec(
            "t", "Shorthand for nothing.", (Param("p", "array", "P.", items="number", length=1, shorthand_for=("q",)),)
        ),
        lambda: ToolRegistry([ToolSpec("t", "One."), ToolSpec("t", "Two.")]),
    ],
)
def test_inconsistent_declarations_are_refused(declare):
    with pytest.raises(ValueError):
        declare()


# --- the number-array fast path -----------------------------------------------------------

NUMBER_ITEMS = st.one_of(
    st.floats(),  # NaN and infinities included
    st.integers(),
    st.sampled_from([10**400, -(10**400), 1e308, -1e308, True, False, "1", None, [1]]),
)


def _outcome(check):
    try:
        return "accepted", check()
    except ToolCallError as error:
        return "refused", error.message


@given(st.one_of(st.lists(NUMBER_ITEMS, min_size=3, max_size=3),  # the length that takes the fast path
                 st.lists(NUMBER_ITEMS, max_size=4), st.tuples(NUMBER_ITEMS, NUMBER_ITEMS, NUMBER_ITEMS)))
@example([math.nan, 0.0, 0.0])
@example([0, math.inf, 0])
@example([10**400, -(10**400), 0])
@example([1e308, 1e308, 0.0])  # finite items whose sum overflows
@example([True, 0, 0])
@example([1, 2.5, -3])
def test_number_arrays_settled_at_once_agree_with_the_item_by_item_check(values):
    target = next(param for param in UNIVERSAL_TOOLS["move_to"].params if param.name == "target")
    item_by_item = _outcome(lambda: target._check_array(values, "move_to", "target"))
    assert _outcome(lambda: target.check(values, "move_to")) == item_by_item
