"""Server sessions under random interleavings: each holds its own world, sees only its own
steps, and gives its world back when closed (the hub alone, without the network)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arena_envs.serve import ArenaAction, SessionError, make_hub

SESSIONS = 5
OPS = st.lists(st.lists(st.tuples(st.integers(0, SESSIONS - 1), st.sampled_from(["reset", "step", "close"])),
                        min_size=1, max_size=8), min_size=1, max_size=8)


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
                    assert i in closed or (op == "step" and ticks[i] is None) or i in called, result
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


@pytest.mark.parametrize("env_id", ["arena_envs/Foraging-v0", "arena_envs/Crafting-v0"])
def test_the_fast_observation_json_is_to_dict(env_id):
    from arena_envs.serve.sessions import observation_json
    from arena_envs.tools import ToolPool

    async def main():
        pool = ToolPool(env_id, size=2)
        seen = [await pool.acquire("a", seed=3)]
        for call in ({"tool": "query_world", "params": {"radius": 50}}, {"tool": "query_inventory"},
                     {"tool": "send_message", "params": {"message": "hi"}}, {"tool": "collect", "params": {}}):
            seen.append((await pool.call(call, id="a")).observation)
        return seen

    for observation in asyncio.run(main()):
        assert observation_json(observation) == observation.to_dict()


def test_arena_serve_refuses_bad_arguments_clearly(capsys):
    from arena_envs.serve.cli import main

    assert main(["no_such_scenario"]) == 2
    assert "unknown scenario 'no_such_scenario'" in capsys.readouterr().err
    assert main(["foraging", "--max-sessions", "0"]) == 2
    assert "max_sessions must be at least 1" in capsys.readouterr().err
    assert main(["treasure_hunt", "--env-kwarg", "difficulty=impossible"]) == 2
    assert "impossible" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["foraging", "--env-kwarg", "novalue"])
