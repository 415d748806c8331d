"""Server sessions under random interleavings: each holds its own world, sees only its own
steps, and gives its world back when closed (the hub alone, without the network)."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arena_envs.serve import ArenaAction, SessionError, make_hub

SESSIONS = 5
OPS = st.lists(st.lists(st.tuples(st.integers(0, SESSIONS - 1),
                                  st.sampled_from(["reset", "step", "close", "step", "costly step"])),
                        min_size=1, max_size=8), min_size=1, max_size=8)
COSTLY = "Thinking it over. " * 200 + '{"tool": "idle", "params": {}}'
"""A message long enough to be read off the event loop, in the hub's reader process."""


@pytest.fixture(scope="module", params=["foraging", "team_capture", "treasure_hunt"])
def hub(request):
    return make_hub(request.param, max_sessions=SESSIONS)


def tick_of(observation) -> int:
    if "tick" in (observation.observation or {}):
        return observation.observation["tick"]
    if observation.info.get("turns") is not None:  # Treasure Hunt counts turns
        return observation.info["turns"]
    return next(iter(observation.observation.values()))["tick"]  # a team: every agent's tick is the world's


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rounds=OPS)
def test_random_interleavings_keep_sessions_apart(hub, rounds):
    async def main():
        sessions = [hub.factory()() for _ in range(SESSIONS)]
        ticks: dict[int, int | None] = dict.fromkeys(range(SESSIONS))  # None: no episode yet
        closed: set[int] = set()

        async def run(i: int, op: str):
            session = sessions[i]
            if op == "close":
                session.close()
                return "closed", None
            try:
                if op == "reset":
                    return "reset", await session.reset_async(seed=i)
                if op == "costly step":  # read in the reader process while the others go on
                    return "step", await session.step_async(ArenaAction(message=COSTLY))
                return "step", await session.step_async(ArenaAction(tool="idle", calls={}))
            except SessionError as err:
                return "refused", str(err)

        for ops in rounds:
            outcomes = await asyncio.gather(*(run(i, op) for i, op in ops))
            called: set[int] = set()  # sessions with an earlier call in this round (they run in order)
            for (i, op), (what, result) in zip(ops, outcomes, strict=True):
                if what == "closed":
                    closed.add(i)
                elif what == "refused":  # closed, no episode yet, or a call still in flight
                    assert i in closed or (op != "reset" and ticks[i] is None) or i in called, result
                else:
                    ticks[i] = 0 if what == "reset" else ticks[i] + 1
                    assert tick_of(result) == ticks[i]  # its own steps only, whatever the others did
                called.add(i)
            owned = [t for t in hub.sessions]
            assert len(owned) == len(set(owned)) <= SESSIONS
            if hasattr(hub, "pool"):
                worlds = [hub.pool.monitor()["ids"][t] for t in owned]
                assert len(worlds) == len(set(worlds))  # never two sessions on one world
        for session in sessions:
            session.close()
        await asyncio.sleep(0)
        await hub.aclose()
        assert not hub.sessions
        stats = hub.stats()
        assert stats.get("free_worlds", 0) == stats.get("worlds", 0)
        assert stats["handles"] == 0

    asyncio.run(main())


def test_a_closed_or_foreign_handle_can_never_touch_a_world():
    async def main():
        hub = make_hub("foraging", max_sessions=2)
        mine, other = hub.factory()(), hub.factory()()
        await mine.reset_async(seed=1)
        with pytest.raises(SessionError, match="reset first"):
            await other.step_async(ArenaAction(tool="idle"))
        other.token = mine.token  # a forged id: same token, different handle
        for attempt in (other.step_async(ArenaAction(tool="idle")), other.reset_async(seed=5)):
            with pytest.raises(SessionError, match="unknown session"):
                await attempt
        step = await mine.step_async(ArenaAction(tool="idle"))
        assert step.observation["tick"] == 1
        mine.close()
        with pytest.raises(SessionError, match="closed"):
            await mine.step_async(ArenaAction(tool="idle"))
        await asyncio.sleep(0)
        await hub.aclose()
        assert hub.stats()["free_worlds"] == hub.stats()["worlds"]

    asyncio.run(main())


def _asdict_reference(observation):
    """What ``Observation.to_dict`` promises: ``dataclasses.asdict`` with the seed's ``from`` key."""
    data = dataclasses.asdict(observation)
    data["inventory"] = [dataclasses.asdict(item) for item in observation.inventory]
    data["messages"] = [{"from": m.from_agent, "content": m.content, "tick": m.tick} for m in observation.messages]
    return data


def _assert_to_dict_is_asdict(observation):
    data = observation.to_dict()
    assert list(data) == [f.name for f in dataclasses.fields(observation)]  # a new field must be written out
    assert data == _asdict_reference(observation)
    shared = observation.to_dict(copy=False)  # the server's: the same data, the observation's own containers
    assert list(shared) == list(data) and shared == data
    assert json.dumps(shared) == json.dumps(data)
    # every container is a copy: changing the dict leaves the observation as it was
    for key, value in data.items():
        original = getattr(observation, key)
        if isinstance(value, (dict, list)) and value:
            assert value is not original
    assert json.loads(json.dumps(data)) == json.loads(json.dumps(_asdict_reference(observation)))


@pytest.mark.parametrize("env_id", ["arena_envs/Foraging-v0", "arena_envs/Crafting-v0"])
def test_the_fast_to_dict_is_asdict(env_id):
    from arena_envs.tools import ToolPool

    async def main():
        pool = ToolPool(env_id, size=2)
        seen = [await pool.acquire("a", seed=3)]
        for call in ({"tool": "query_world", "params": {"radius": 50}}, {"tool": "query_inventory"},
                     {"tool": "send_message", "params": {"message": "hi"}}, {"tool": "collect", "params": {}},
                     {"tool": "craft", "params": {"recipe_name": "iron_ingot"}}, {"tool": "move_to"}):
            seen.append((await pool.call(call, id="a")).observation)
        return seen

    for observation in asyncio.run(main()):
        _assert_to_dict_is_asdict(observation)


def test_the_fast_to_dict_is_asdict_for_teams_and_odd_data():
    from arena_envs import team_capture_v0
    from arena_envs.observations import (
        ActionResult,
        EntityInfo,
        HazardInfo,
        Inventory,
        ItemInfo,
        Message,
        Observation,
        RecipeInfo,
        ResourceInfo,
        StationInfo,
    )
    from arena_envs.wrappers import ToolCallWrapper

    teams = ToolCallWrapper(team_capture_v0.parallel_env(agents_per_team=2))
    observations, _ = teams.reset(seed=1)
    for _ in range(3):
        for observation in observations.values():
            _assert_to_dict_is_asdict(observation)
        say = {"tool": "send_message", "params": {"message": "go", "target_agent": "all"}}
        observations, *_ = teams.step({name: say for name in observations})
    odd = Observation(agent_id="x", tick=1, position=(0.0, 0.0, 0.0),
                      visible_entities=[EntityInfo("e", "agent", (1.0, 0.0, 2.0), 2.2, {"nested": [{"a": (1, 2)}]})],
                      nearby_resources=[ResourceInfo("Berry1", "berry", (1.0, 0.0, 1.0), 1.4)],
                      nearby_hazards=[HazardInfo("Pit1", "pit", (2.0, 0.0, 0.0), 2.0, 10.0)],
                      nearby_stations=[StationInfo("Anvil", "anvil", (3.0, 0.0, 0.0), 3.0, True)],
                      inventory=Inventory([ItemInfo("i1", "wood", 2)]),
                      last_action_result=ActionResult(False, "INVALID_PARAMS", "no", "collect", None),
                      messages=[Message("blue_agent_2", "hi", 3)],
                      available_recipes={"r": RecipeInfo("r", {"wood": 2}, "workbench", 3)},
                      query_result={"entities": [{"position": (1.0, 0.0, 1.0), "tags": ["a"]}]},
                      inventory_details={"wood": {"count": 2}}, custom={"deep": {"list": [1, [2, 3]]}})
    _assert_to_dict_is_asdict(odd)
    data = odd.to_dict()
    data["visible_entities"][0]["metadata"]["nested"][0]["a"] = None
    data["custom"]["deep"]["list"].append(4)
    assert odd.visible_entities[0].metadata == {"nested": [{"a": (1, 2)}]}
    assert odd.custom == {"deep": {"list": [1, [2, 3]]}}


def test_arena_serve_refuses_bad_arguments_clearly(capsys):
    from arena_envs.serve.cli import main

    assert main(["no_such_scenario"]) == 2
    assert "unknown environment 'no_such_scenario'" in capsys.readouterr().err
    assert main(["foraging", "--max-sessions", "0"]) == 2
    assert "max_sessions must be at least 1" in capsys.readouterr().err
    assert main(["treasure_hunt", "--env-kwarg", "difficulty=impossible"]) == 2
    assert "impossible" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["foraging", "--env-kwarg", "novalue"])


def _openai_message(*calls):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{k}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        for k, (name, arguments) in enumerate(calls)]}


def test_an_assistant_message_with_several_calls_plays_them_as_consecutive_ticks():
    """Each call of one message is one tick, in order (as ChatEnv plays them); the answer
    is the last tick's, its reward the ticks' sum, and each call's result is reported."""
    from arena_envs.tools import ToolPool

    calls = [("query_inventory", {}), ("move_to", {"target": [3, 0, 4]}), ("collect", {"target_name": "Nope"})]

    async def main():
        hub = make_hub("foraging", max_sessions=2)
        session = hub.factory()()
        await session.reset_async(seed=4)
        answer = await session.step_async(ArenaAction(message=_openai_message(*calls)))
        pool = ToolPool("arena_envs/Foraging-v0", size=1)  # the same calls one by one, in process
        await pool.acquire("solo", seed=4)
        solo = [await pool.call({"tool": name, "params": arguments}, id="solo") for name, arguments in calls]
        return answer, solo, session.state

    answer, solo, state = asyncio.run(main())
    parse = answer.info["parse"]
    assert parse["calls_parsed"] == parse["calls_run"] == 3 and parse["calls_not_run"] == 0
    assert [r["tool"] for r in parse["results"]] == ["query_inventory", "move_to", "collect"]
    assert parse["results"] == [dataclasses.asdict(step.observation.last_action_result) for step in solo]
    assert parse["results"][2]["success"] is False
    assert answer.observation == solo[-1].observation.to_dict()
    assert answer.reward == pytest.approx(sum(step.reward for step in solo))
    assert answer.observation["tick"] == 3
    assert state.step_count == 1  # one message is one OpenEnv step


def test_calls_beyond_the_limit_or_after_the_episode_ended_are_not_run():
    from arena_envs.serve.reading import MAX_CALLS

    async def main():
        hub = make_hub("foraging", max_sessions=2)
        many = hub.factory()()
        await many.reset_async(seed=1)
        over = await many.step_async(ArenaAction(message=_openai_message(*[("idle", {})] * (MAX_CALLS + 3))))
        short = make_hub("foraging", max_sessions=1, max_ticks=2)  # the episode ends mid-message
        ending = short.factory()()
        await ending.reset_async(seed=1)
        ended = await ending.step_async(ArenaAction(message=_openai_message(*[("idle", {})] * 5)))
        return over, ended

    over, ended = asyncio.run(main())
    assert over.info["parse"]["calls_run"] == MAX_CALLS and over.info["parse"]["calls_not_run"] == 3
    assert over.observation["tick"] == MAX_CALLS
    assert ended.done and ended.truncated
    assert ended.info["parse"]["calls_run"] == 2 and ended.info["parse"]["calls_not_run"] == 3


_ASSISTANT_TEXT = st.one_of(st.none(), st.text(max_size=40), st.sampled_from(
    ['{"tool": "idle"}', '<tool_call>{bad</tool_call>', '{"name": "collect"', "```json\n[]\n```"]))
_TOOL_CALL = st.fixed_dictionaries({"function": st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(["idle", "move_to", "nope", ""]), st.integers()),
     "arguments": st.one_of(st.text(max_size=20), st.just('{"target": [1, 0, 1]}'), st.none())})})
_MESSAGES = st.one_of(_ASSISTANT_TEXT.filter(lambda text: text is not None), st.fixed_dictionaries(
    {"role": st.just("assistant"), "content": _ASSISTANT_TEXT,
     "tool_calls": st.one_of(st.none(), st.lists(_TOOL_CALL, max_size=3), st.just("x"))}))


@pytest.fixture(scope="module", params=["foraging", "treasure_hunt"])
def message_hub(request):
    return make_hub(request.param, max_sessions=2)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.lists(_MESSAGES, min_size=1, max_size=4))
def test_any_assistant_message_gets_an_answer_or_a_clear_error(message_hub, messages):
    """Messages with no readable call, broken calls, odd shapes: each one is either carried
    out (its calls reported in ``info["parse"]``, a failed call as INVALID_PARAMS) or refused
    with a SessionError; the session goes on either way. An empty message once raised a
    KeyError here."""
    pool = message_hub.scenario != "treasure_hunt"

    async def main():
        session = message_hub.factory()()
        try:
            await session.reset_async(seed=0)
            for message in messages:
                try:
                    answer = await session.step_async(ArenaAction(message=message))
                except SessionError:
                    continue
                parse = answer.info["parse"]
                assert parse["calls_run"] >= 1 and parse["calls_not_run"] >= 0
                assert len(parse["results"]) == parse["calls_run"]
                if pool:
                    assert answer.observation["last_action_result"] == parse["results"][-1]
            call = {"tool": "idle"} if pool else {"tool": "ls"}
            assert (await session.step_async(ArenaAction(**call))).info["success"] is not None
        finally:
            session.close()

    asyncio.run(main())


def test_treasure_hunt_reports_every_calls_output():
    async def main():
        hub = make_hub("treasure_hunt", max_sessions=1)
        session = hub.factory()()
        await session.reset_async(seed=2)
        return await session.step_async(ArenaAction(message=_openai_message(("pwd", {}), ("ls", {}))))

    answer = asyncio.run(main())
    outputs = [result["output"] for result in answer.info["parse"]["results"]]
    assert len(outputs) == 2 and outputs[0] != outputs[1]
    assert outputs[-1] == answer.text
    assert answer.info["turns"] == 2


def test_a_step_answer_made_without_validation_is_the_validated_one():
    """``step_answer`` (a pool server's step answers, built without pydantic's validation)
    gives the model, dump and JSON that ``observation_answer`` gives for the same step."""
    from arena_envs.serve.models import ArenaObservation, observation_answer, step_answer
    from arena_envs.tools import ToolPool

    async def main():
        pool = ToolPool("arena_envs/Foraging-v0", size=1)
        await pool.acquire("a", seed=2)
        calls = ({"tool": "query_world", "params": {"radius": 30}}, {"tool": "collect", "params": {"target_name": "X"}},
                 {"tool": "move_to", "params": {"target": [40, 0, 40]}}, {"tool": "nope"})
        return [await pool.call(call, id="a") for call in calls]

    for k, step in enumerate(asyncio.run(main())):
        obs = step.observation
        info = {**step.info, "parse": {"format": "openai", "results": [None]}} if k % 2 else step.info
        for terminated, truncated in ((step.terminated, step.truncated), (True, False), (False, True)):
            args = (obs.to_text(), obs.to_dict(), step.reward, terminated, truncated, info)
            fast = step_answer(*args)
            checked = observation_answer(args[0], args[1], [{"type": "function"}], first=False, reward=args[2],
                                         terminated=terminated, truncated=truncated, info=info)
            assert isinstance(fast, ArenaObservation)
            assert fast == checked
            assert fast.model_dump() == checked.model_dump()
            assert fast.model_dump_json() == checked.model_dump_json()
            assert fast.model_fields_set == checked.model_fields_set | {"metadata"}
            assert fast.done is (terminated or truncated) and fast.tools == [] and fast.metadata == {}
    assert step_answer("t", {}, 0.0, False, False, {}).info == {}


def test_the_wire_dump_is_pydantics_dump():
    """``ArenaObservation.model_dump`` as OpenEnv's server calls it (its fast path, which
    shares containers) equals pydantic's own dump, and so does the JSON sent; any other
    call of it is pydantic's."""
    from openenv.core.env_server.serialization import serialize_observation
    from openenv.core.env_server.types import WSObservationResponse
    from pydantic import BaseModel

    from arena_envs.serve.models import observation_answer, step_answer

    async def main():
        hub = make_hub("crafting", 2)
        session = hub.factory()()
        first = await session.reset_async(seed=3, arrays=True)
        steps = [await session.step_async(ArenaAction(**call)) for call in (
            {"tool": "query_inventory"}, {"tool": "move_to", "params": {"target": [5, 0, 5]}},
            {"message": {"role": "assistant", "content": "", "tool_calls": []}}, {"tool": "nope"})]
        return [first, *steps]

    answers = asyncio.run(main())
    answers += [step_answer("t", {"a": [1, {"b": (2.0, None)}]}, 0.5, True, False, {"score": 1.0}),
                observation_answer("t", None, [{"type": "function"}], first=True)]
    for answer in answers:
        exclude = {"reward", "done"}
        fast, slow = answer.model_dump(exclude=exclude), BaseModel.model_dump(answer, exclude=exclude)
        assert fast == slow and list(fast) == list(slow)
        sent = json.loads(WSObservationResponse(data=serialize_observation(answer)).model_dump_json())
        assert sent["data"]["observation"] == json.loads(answer.model_dump_json(exclude=exclude))
        assert answer.model_dump() == BaseModel.model_dump(answer)  # other calls: pydantic's
        assert answer.model_dump(exclude={"reward"}) == BaseModel.model_dump(answer, exclude={"reward"})
        assert answer.model_dump(mode="json", exclude=exclude) == BaseModel.model_dump(answer, mode="json",
                                                                                       exclude=exclude)


@pytest.mark.parametrize("data", [
    {"tool": "idle"},
    {"tool": "move_to", "params": {"target": [3, 0, 4]}, "reasoning": "go"},
    {"tool": "cd", "path": "amber", "depth": None, "nested": {"a": [1, None]}},
    {"name": "collect", "arguments": "{\"target_name\": \"Berry1\"}", "tool": None},
    {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "idle", "arguments": "{}"}}]},
    {"tool": "idle", "calls": {"blue_agent_1": {"tool": "idle"}}, "metadata": {"k": 1}},
    {},
])
def test_a_plain_call_is_the_action_as_pydantic_dumps_it(data):
    """``ArenaAction.tool_call`` reads the call off the attributes: the same dict (and key
    order) as the model dump it replaced."""
    action = ArenaAction(**data)
    assert action.tool_call() == action.model_dump(exclude={"metadata", "calls"}, exclude_none=True)
    assert list(action.tool_call()) == list(action.model_dump(exclude={"metadata", "calls"}, exclude_none=True))
    message = ArenaAction(message={"role": "assistant", "content": "idle"}, tool="ignored")
    assert message.tool_call() == {"role": "assistant", "content": "idle"}
