"""Chat sessions whose Treasure Hunt runs on a remote ``arena-serve`` (OpenEnv's client, the real server).

The rollout a GRPO trainer plays (``ChatBatch``) takes ``remote=URL`` and is otherwise unchanged: the
transcripts, returns and outcomes must be the ones the same replies make in process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from process_helpers import free_port, serving

from arena_envs.llm import ChatBatch, ChatPool, format_reply
from arena_envs.llm.scripted import policy_for

ARENA_SERVE = str(Path(sys.executable).with_name("arena-serve"))
SEEDS = [5, 6, 7, 8]
FIRST_REPLIES = ["", "I will look around first.", '{"tool": "cd", "params": {"path": "/nowhere"}}', None]


def play(**where) -> list[tuple]:
    """Four hunts: the first replies are empty, prose, a failing call and the scripted one; then scripted."""
    batch = ChatBatch("TreasureHunt-v0", len(SEEDS), max_turns=10, **where)
    try:
        batch.reset(SEEDS)
        for turn in range(12):
            replies = [None if s.done else FIRST_REPLIES[i] if turn == 0 and FIRST_REPLIES[i] is not None
                       else format_reply(policy_for(s.messages)(s.messages), "hermes")["content"]
                       for i, s in enumerate(batch.sessions)]
            if all(r is None for r in replies):
                break
            batch.step(replies)
        return [(s.messages, round(s.episode_return, 6), s.turn, s.done, s.last_info) for s in batch.sessions]
    finally:
        batch.close()


@pytest.fixture(scope="module")
def server_url():
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serving([ARENA_SERVE, "treasure_hunt", "--port", str(port), "--env-kwarg", "difficulty=easy"],
                 f"{url}/health"):
        yield url


def test_a_remote_hunt_reads_exactly_as_the_local_one(server_url):
    local, remote = play(difficulty="easy"), play(remote=server_url)
    assert remote == local
    assert [info["success"] for *_, info in remote] == [True] * 4  # the scripted replies win every hunt
    assert "Error" in remote[2][0][3]["content"]  # the failing call's tool message came from the server


def test_remote_play_is_refused_where_it_does_not_apply(server_url):
    with pytest.raises(ValueError, match="covers Treasure Hunt"):
        ChatPool("Foraging-v0", 1, remote=server_url)
    with pytest.raises(ValueError, match="are the server's"):
        ChatPool("TreasureHunt-v0", 1, remote=server_url, difficulty="hard")


def test_a_server_of_another_scenario_is_named(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serving([ARENA_SERVE, "foraging", "--port", str(port)], f"{url}/health"):
        batch = ChatBatch("TreasureHunt-v0", 1, remote=url)
        try:
            with pytest.raises(ConnectionError, match="does not serve Treasure Hunt"):
                batch.reset(0)
        finally:
            batch.close()


def test_a_remote_session_outlives_a_long_pause_between_steps(server_url):
    """A model generating between steps leaves the batch idle for minutes on a CPU: the WebSockets'
    keep-alive pings (uvicorn's: every 20 s, 20 s to answer) must still be answered, else the server
    drops the socket and the next step lands in a new session with no episode."""
    import time

    batch = ChatBatch("TreasureHunt-v0", 2, remote=server_url)
    try:
        batch.reset([1, 2])
        time.sleep(45)
        steps = batch.step(['<tool_call>{"name": "ls", "arguments": {}}</tool_call>'] * 2)
        assert all(step.messages[-1]["content"].startswith("[turn 1/50 |") for step in steps)
    finally:
        batch.close()


SCRIPTED = "scripted"  # stands for the scripted agent's reply to what the session reads at that moment
REPLIES = st.sampled_from([None, "", "Let me think.", SCRIPTED, SCRIPTED,
                           '<tool_call>{"name": "ls", "arguments": {}}</tool_call>',
                           '{"tool": "cd", "params": {"path": "/nowhere"}}',
                           '<tool_call>{"name": "cat", "arguments": {"path": 7}}</tool_call>'])
SIZE = 3
OPERATIONS = st.lists(st.one_of(st.lists(REPLIES, min_size=SIZE, max_size=SIZE),
                                st.lists(st.integers(0, 10**6), min_size=SIZE, max_size=SIZE).map(tuple)),
                      min_size=1, max_size=10)


def read(step) -> tuple | None:
    return None if step is None else (step.messages, round(step.reward, 6), step.terminated, step.truncated)


@pytest.fixture(scope="module")
def batches(server_url):
    local = ChatBatch("TreasureHunt-v0", SIZE, max_turns=6, difficulty="easy")
    remote = ChatBatch("TreasureHunt-v0", SIZE, max_turns=6, remote=server_url)
    yield local, remote
    local.close()
    remote.close()


@settings(max_examples=int(os.environ.get("ARENA_FUZZ_EXAMPLES", "15")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seeds=st.lists(st.integers(0, 10**6), min_size=SIZE, max_size=SIZE), operations=OPERATIONS)
def test_any_sequence_of_resets_and_ragged_steps_reads_as_in_process(batches, seeds, operations):
    """Sessions at different turns, some sitting steps out, reset mid-episode: the remote batch's
    sessions step concurrently on their own thread and must still read exactly as the local ones."""
    local, remote = batches
    assert remote.reset(seeds) == local.reset(seeds)
    for operation in operations:
        if isinstance(operation, tuple):  # a reset of every session, whatever turn it is at
            assert remote.reset(list(operation)) == local.reset(list(operation))
            continue
        replies = [format_reply(policy_for(s.messages)(s.messages), "hermes")["content"] if r == SCRIPTED else r
                   for r, s in zip(operation, local.sessions, strict=True)]
        assert [read(step) for step in remote.step(replies)] == [read(step) for step in local.step(replies)]
    for mine, theirs in zip(remote.sessions, local.sessions, strict=True):
        assert (mine.messages, mine.turn, mine.done, round(mine.episode_return, 6)) == \
               (theirs.messages, theirs.turn, theirs.done, round(theirs.episode_return, 6))
