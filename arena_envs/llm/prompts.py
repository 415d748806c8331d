"""The opening system message of each scenario: its goal, its rules and how to call tools."""

from __future__ import annotations

CALLING = (
    "How to act: call the tools offered to you. If your interface has no function calling, write each "
    'call as JSON in your reply, e.g. {{"name": "{example}", "arguments": {{{example_args}}}}}. '
    "Several calls in one reply run one after another, one per turn of the world (at most {max_calls} "
    "per reply). {no_call}"
)
NO_CALL_CONTINUE = ("A reply without a tool call lets the world run one tick with your current action "
                    "carrying on.")
NO_CALL_END = "A reply without a tool call ends the episode."
NO_CALL_TURN = "A reply without a tool call still costs a turn."

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
        "check_treasure with that key. Paths starting with / start at the hunt root. You have {turns} tool "
        "calls; each costs a little reward, finding the treasure gives +1."
    ),
}
EXAMPLES = {
    "Foraging": ("move_to", '"target": [3, 0, 4]'),
    "Crafting": ("collect", '"target_name": "IronOre1"'),
    "TeamCapture": ("move_to", '"target": [0, 0, 0]'),
    "TreasureHunt": ("cat", '"file": "start.txt"'),
}


def system_prompt(scenario: str, max_calls: int, end_without_call: bool = False, **facts) -> str:
    """The system message of ``scenario`` (a key of GOALS), its numbers filled from ``facts``."""
    example, example_args = EXAMPLES[scenario]
    carry_on = NO_CALL_TURN if scenario == "TreasureHunt" else NO_CALL_CONTINUE  # no action carries on there
    calling = CALLING.format(example=example, example_args=example_args, max_calls=max_calls,
                             no_call=NO_CALL_END if end_without_call else carry_on)
    return GOALS[scenario].format(**facts) + "\n\n" + calling
