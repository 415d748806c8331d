"""The names resolver in process, exactly (tests/test_names_cli.py runs it through every CLI): each
spelling, each refusal's one line, each "did you mean"."""

import pytest

from arena_envs.names import (
    SCENARIOS,
    UnknownNameError,
    _folded,
    env_id,
    find,
    registered_id,
    resolve,
    suggestion,
    unknown,
)


def test_each_scenario_has_its_ids_and_spellings():
    team, hunt = SCENARIOS["team_capture"], SCENARIOS["treasure_hunt"]
    assert list(SCENARIOS) == ["foraging", "crafting", "team_capture", "treasure_hunt"]  # the docs' order
    assert (team.env_id, team.short_id, team.module) == ("arena_envs/TeamCapture-v0", "TeamCapture-v0",
                                                         "team_capture_v0")
    assert team.spellings() == ["TeamCapture-v0", "arena_envs/TeamCapture-v0", "team_capture", "team_capture_v0"]
    assert hunt.spellings() == ["TreasureHunt-v0", "arena_envs/TreasureHunt-v0", "treasure_hunt"]
    assert hunt.module is None and hunt.text and not hunt.multi_agent
    assert team.multi_agent and not team.text


@pytest.mark.parametrize("spelling", ["TeamCapture-v0", "arena_envs/TeamCapture-v0", "team_capture", "team_capture_v0",
                                      "TEAMCAPTURE", "team-capture", " teamcapture_V0 ", "ARENA_ENVS/team capture-v0",
                                      "TeamCapture_v0"])
def test_every_spelling_of_a_scenario_is_found(spelling):
    assert find(spelling) is SCENARIOS["team_capture"]
    assert registered_id(spelling) == env_id(spelling) == "arena_envs/TeamCapture-v0"
    assert resolve(spelling) is SCENARIOS["team_capture"]


@pytest.mark.parametrize("name", ["TeamCapture-v1", "teamcapturev0", "capture", "arena_envs", "other/TeamCapture-v0",
                                  "", "v0", 7, None])
def test_what_is_no_scenario_is_not_found(name):
    assert find(name) is None


def test_names_are_folded_to_their_comparable_part_and_version():
    assert _folded(" arena_envs/Team_Capture-V12 ") == ("teamcapture", 12)
    assert _folded("Foraging") == ("foraging", None)
    assert _folded("my-env_v0x") == ("myenvv0x", None)
    assert _folded("x/foraging-v0") == ("x/foraging", 0)


def test_another_name_is_registered_as_it_is():
    assert registered_id("CartPole-v1") == "CartPole-v1"
    assert registered_id("Foraging-v1") == "Foraging-v1"


def test_the_closest_candidate_keeps_its_own_case_and_none_is_suggested_when_nothing_is_close():
    assert suggestion("foragin-v0", ["Crafting-v0", "Foraging-v0"]) == "Foraging-v0"
    assert suggestion("FORAGING-V0", ["foraging-v0"]) == "foraging-v0"
    assert suggestion("zzzz", ["Foraging-v0", "Crafting-v0"]) is None
    assert suggestion("abcd", ["abxy"]) == "abxy"  # half the letters in common: close enough


def test_an_unknown_name_is_one_line_with_the_closest_spelling_and_what_is_known():
    assert unknown("Foragin-v0", "environment", ["Foraging-v0", "foraging"]) == \
        "unknown environment 'Foragin-v0'; did you mean 'Foraging-v0'? (known: Foraging-v0, foraging)"
    assert unknown("zzz", "config", ["a", "b"], shown=["A"]) == "unknown config 'zzz' (known: A)"
    with pytest.raises(UnknownNameError) as error:
        resolve("Foragin-v0")
    assert str(error.value) == ("unknown environment 'Foragin-v0'; did you mean 'Foraging-v0'? "
                                "(known: Foraging-v0, Crafting-v0, TeamCapture-v0, TreasureHunt-v0)")


def test_a_scenario_a_command_does_not_take_is_named_with_the_ones_it_does():
    assert resolve("crafting", among=["foraging", "crafting"]) is SCENARIOS["crafting"]
    with pytest.raises(UnknownNameError) as error:
        resolve("TeamCapture-v0", among=["treasure_hunt", "foraging"])
    assert str(error.value) == "TeamCapture-v0 is not available here (choose one of Foraging-v0, TreasureHunt-v0)"
    with pytest.raises(UnknownNameError) as error:
        resolve("treasure", among=["treasure_hunt"])
    assert str(error.value) == ("unknown environment 'treasure'; did you mean 'treasure_hunt'? "
                                "(known: TreasureHunt-v0)")
    assert isinstance(error.value, ValueError)
