"""The opening system message of each scenario: its goal, its rules, its budget and how to call tools.

Everything the prompt states comes from the run: the turn budget from ``max_turns`` (and the
scenario's own limit), the call syntax from the run's call format (one syntax throughout,
the same one :func:`~arena_envs.llm.formats.format_reply` writes and a strict parse accepts),
what a reply without a call does from the environment's own rule, and the tool list
whenever the tools are not passed to the server natively.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from arena_envs.llm.parsers import FORMATS, format_reply

NO_CALL_CONTINUE = ("A reply without a readable tool call lets the world run one tick with your current action "
                    "carrying on")
NO_CALL_END = "A reply without a readable tool call ends the episode"
NO_CALL_TURN = "A reply without a readable tool call still costs a turn (one of the hunt's tool calls)"
NOTE_CONTINUE = "the world ran one tick with your action carrying on"
NOTE_END = "the episode ends"
NOTE_TURN = "that cost a turn"

GOALS = {
    "Foraging": (
        "# Foraging\n"
        "You are an agent in a 2D world (x and z from -{half:g} to {half:g}; y is always 0). Collect every "
        "resource (berries, wood, stone) as fast as you can. Each resource gives +1. Hazards (pits, fires) "
        "hurt you: avoid walking through them. The episode ends when everything is collected, your health "
        "reaches 0, or after {ticks} ticks (0.1 s each).\n"
        "Rules: move_to sets a destination and you keep walking there ({speed:g} units/s) on later ticks "
        "until you arrive or give a new order. collect works within {collect:g} units of a resource. "
        "query_world lists entities beyond your sight radius of {sight:g}."
    ),
    "Crafting": (
        "# Crafting\n"
        "You are an agent in a 2D world (x and z from -{half:g} to {half:g}). Goal: craft an {goal}. "
        "Gather materials with move_to and collect (within {collect:g} units), then craft at the right "
        "station (within {craft:g} units). query_world finds resources and stations. The episode ends when "
        "the goal is crafted or after {ticks} ticks.\n"
        "Recipes (output: inputs @ station type, crafting time): {recipes}."
    ),
    "TeamCapture": (
        "# Team Capture\n"
        "You are {agent} of the {team} team in a 2D arena (x and z from -{half:g} to {half:g}). Capture "
        "points by standing inside their zone (radius {radius:g}) with more teammates than the enemy has "
        "there; owned points score every second. Coordinate with teammates through send_message (free "
        "text; delivered next tick to teammates within range, sometimes lost). The match ends when a team "
        "reaches {target:g} points or after {ticks} ticks."
    ),
    "TreasureHunt": (
        "# Treasure Hunt\n"
        "A treasure is hidden in a directory tree. Read start.txt and follow the clues: each clue names the "
        "next file. The last one holds a 16-character key. In the treasure's directory, call "
        "check_treasure with that key. Paths starting with / start at the hunt root. The hunt allows {calls} "
        "tool calls in all; each costs a little reward, finding the treasure gives +1."
    ),
}
EXAMPLES = {
    "Foraging": ("move_to", {"target": [3, 0, 4]}),
    "Crafting": ("collect", {"target_name": "IronOre1"}),
    "TeamCapture": ("move_to", {"target": [0, 0, 0]}),
    "TreasureHunt": ("cat", {"file": "start.txt"}),
}
ONE_TICK_EACH = {"TreasureHunt": "each one tool call of the hunt"}


def call_example(scenario: str, call_format: str = "openai") -> str:
    """How a call is written in ``call_format``: what :func:`format_reply` writes for the scenario's
    example call (``openai``: the JSON a model without function calling writes instead)."""
    name, arguments = EXAMPLES[scenario]
    if call_format == "openai":
        return json.dumps({"name": name, "arguments": arguments})
    if call_format == "bare_name":
        call_format = "json"  # the example has arguments; the prompt adds that a bare name calls without any
    return format_reply([(name, arguments)], call_format)["content"]


def no_call_note(scenario: str, end_without_call: bool) -> str:
    """What the user message says happened after a reply without a readable call."""
    return NOTE_END if end_without_call else NOTE_TURN if scenario == "TreasureHunt" else NOTE_CONTINUE


def system_prompt(scenario: str, max_calls: int, end_without_call: bool = False, *, call_format: str = "openai",
                  turns: int | None = None, tools: Sequence[dict[str, Any]] | None = None,
                  no_call_penalty: float = 0.0, **facts: Any) -> str:
    """The system message of ``scenario`` (a key of GOALS), its numbers filled from ``facts``.

    ``turns``: the replies the agent has (None: only the scenario's limit, stated in its goal);
    ``tools``: OpenAI schemas to list in the prompt (when the server is not given them);
    ``no_call_penalty``: the extra reward cost of a reply without a readable call.
    """
    if call_format not in FORMATS:
        raise ValueError(f"unknown call format {call_format!r}; formats: {', '.join(FORMATS)}")
    example = call_example(scenario, call_format)
    if call_format == "openai":
        how = ("call the tools offered to you (function calling). If your interface has no function calling, "
               f"write each call as JSON alone in your reply, exactly like this:\n{example}\n")
    else:
        how = f"write each call exactly like this:\n{example}\n"
        if call_format == "bare_name":
            how += "A tool without arguments may be called by its name alone.\n"
    each = ONE_TICK_EACH.get(scenario, "one tick of the world each")
    rule = NO_CALL_END if end_without_call else NO_CALL_TURN if scenario == "TreasureHunt" else NO_CALL_CONTINUE
    if no_call_penalty:
        rule += f" and costs {no_call_penalty:g} reward"
    lines = [GOALS[scenario].format(**facts), "",
             f"How to act: {how}Several calls in one reply run one after another, {each} (at most {max_calls} "
             f"per reply). {rule}."]
    if turns is not None:
        lines.append(f"You have {turns} turns (one reply each); each observation ends with [turn i/{turns}].")
    if tools:
        lines += ["", "Tools (OpenAI function schemas, one per line):",
                  *(json.dumps(tool.get("function", tool), separators=(",", ":")) for tool in tools)]
    return "\n".join(lines)
