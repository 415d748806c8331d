"""``send_message`` in Team Capture: next-tick delivery, range, targets, drops, team isolation.

A received message shows in the receiver's ``messages`` row of its sender as
(sender number, token, age in ticks, direct).
"""

from __future__ import annotations

import numpy as np
import pytest
from team_capture_helpers import OK, TOOLS, TeamWorld, idle_actions, random_actions

from arena_envs import team_capture_v0
from arena_envs.team_capture import uniform_hash


def row(obs, b: int, receiver: int, sender_number: int) -> list[float]:
    return obs["messages"][b, receiver, sender_number - 1].tolist()


def test_a_message_arrives_next_tick_and_ages():
    w = TeamWorld(agents_per_team=3, message_drop_prob=0.0)
    for a in range(3):
        w.place(0, a, float(a), 0.0)
    assert (w.obs["messages"] == 0).all()
    obs, *_ = w.say(0, 0, token=7)
    assert obs["last_action"][0, 0].tolist() == [TOOLS["send_message"], OK]
    # in the observation of the next tick, at every teammate in range; the sender hears nothing
    assert row(obs, 0, 1, 1) == [1.0, 7.0, 0.0, 0.0] and row(obs, 0, 2, 1) == [1.0, 7.0, 0.0, 0.0]
    assert (obs["messages"][0, 0] == 0).all()
    for age in (1, 2, 3):
        obs, *_ = w.step()
        assert row(obs, 0, 1, 1) == [1.0, 7.0, float(age), 0.0]
    obs, *_ = w.say(0, 0, token=2)  # a new message replaces the old one
    assert row(obs, 0, 2, 1) == [1.0, 2.0, 0.0, 0.0]


def test_messages_reach_teammates_within_15_only():
    w = TeamWorld(agents_per_team=4, message_drop_prob=0.0)
    w.place(0, 0, 0.0, 0.0)
    w.place(0, 1, 14.99, 0.0)
    w.place(0, 2, 0.0, -15.01)
    w.place(0, 3, 10.6, 10.6)  # 14.99 diagonally
    obs, *_ = w.say(0, 0, token=3)
    assert row(obs, 0, 1, 1)[:2] == [1.0, 3.0] and row(obs, 0, 3, 1)[:2] == [1.0, 3.0]
    assert row(obs, 0, 2, 1) == [0.0] * 4


def test_range_is_measured_where_the_agents_are_after_the_tick():
    w = TeamWorld(message_drop_prob=0.0)
    w.place(0, 0, 0.0, 0.0)
    w.place(0, 1, 15.3, 0.0)
    action = w.actions()
    action["tool"][0, 0] = TOOLS["send_message"]
    action["send_message"][0, 0] = (5, 0)
    action["tool"][0, 1] = TOOLS["move_to"]
    action["move_to"][0, 1] = (0.0, 0.0, 1.0)  # 0.5 closer by the end of the tick
    obs, *_ = w.step(action)
    assert row(obs, 0, 1, 1)[:2] == [1.0, 5.0]


def test_a_target_reaches_that_teammate_alone():
    w = TeamWorld(agents_per_team=3, message_drop_prob=0.0)
    for a in range(6):
        w.place(0, a, 0.5 * a, 0.0)
    obs, *_ = w.say(0, 0, token=9, target=3)  # blue_agent_3
    assert row(obs, 0, 2, 1) == [1.0, 9.0, 0.0, 1.0]
    assert row(obs, 0, 1, 1) == [0.0] * 4
    obs, *_ = w.say(0, 4, token=4, target=1)  # red_agent_2 to red_agent_1
    assert row(obs, 0, 3, 2) == [2.0, 4.0, 0.0, 1.0] and row(obs, 0, 5, 2) == [0.0] * 4
    obs, *_ = w.say(0, 1, token=1, target=2)  # to itself: nobody
    fresh = (obs["messages"][0, ..., 0] > 0) & (obs["messages"][0, ..., 2] == 0)
    assert obs["last_action"][0, 1].tolist() == [TOOLS["send_message"], OK] and not fresh.any()


def test_messages_never_reach_the_other_team():
    w = TeamWorld(4, agents_per_team=3, message_drop_prob=0.0)
    rng = np.random.default_rng(0)
    for b in range(4):
        for a in range(6):
            w.place(b, a, 0.3 * a, 0.2 * b)  # everyone within range of everyone
    for _ in range(40):
        action = idle_actions((4, 6))
        blue = rng.random((4, 3)) < 0.7
        action["tool"][:, :3] = np.where(blue, TOOLS["send_message"], TOOLS["idle"])
        action["send_message"][:, :3] = np.stack([rng.integers(1, 11, (4, 3)), rng.integers(0, 4, (4, 3))], -1)
        obs, *_ = w.step(action)
        assert (obs["messages"][:, 3:] == 0).all()  # red heard nothing
        assert (w.state.extra["inbox_token"][:, 3:] == -1).all()
    assert (obs["messages"][:, :3, :, 0] > 0).sum() > 0  # while blue did hear itself talk
    # and red's chatter stays within red
    action = idle_actions((4, 6))
    action["tool"][:, 3:] = TOOLS["send_message"]
    action["send_message"][:, 3:] = (15, 0)
    obs, *_ = w.step(action)
    assert (obs["messages"][:, 3:, :, 1] == 15).sum() == 4 * 3 * 2
    assert (obs["messages"][:, :3, :, 1] != 15).all()


@pytest.mark.parametrize("drop", [0.1, 0.35])
def test_the_drop_rate_is_the_configured_probability(drop):
    B, N, T = 64, 4, 40
    w = TeamWorld(B, agents_per_team=N, message_drop_prob=drop)
    for b in range(B):
        for a in range(2 * N):
            w.place(b, a, 0.5 * a, 0.0)
    action = idle_actions((B, 2 * N))
    action["tool"][:, :N] = TOOLS["send_message"]  # every blue agent broadcasts every tick
    action["send_message"][:, :N] = (1, 0)
    delivered = np.zeros((B, N, N), int)  # (world, receiver, sender)
    for _ in range(T):
        obs, *_ = w.step(action)
        messages = obs["messages"][:, :N]
        delivered += (messages[..., 0] > 0) & (messages[..., 2] == 0)  # arrived this tick
    rate = delivered.sum() / (B * T * N * (N - 1))
    assert abs(rate - (1 - drop)) < 0.02, rate  # 30,720 deliveries: the standard error is under 0.003
    # every pair of agents drops at that rate (2,560 deliveries each)
    per_pair = delivered.sum(0)[~np.eye(N, dtype=bool)] / (B * T)
    assert (np.abs(per_pair - (1 - drop)) < 0.04).all(), per_pair


def test_no_drops_at_0_and_no_deliveries_at_1():
    for drop, expected in ((0.0, 1.0), (1.0, 0.0)):
        w = TeamWorld(8, agents_per_team=2, message_drop_prob=drop)
        for b in range(8):
            w.place(b, 0, 0.0, 0.0)
            w.place(b, 1, 1.0, 0.0)
        for _ in range(10):
            obs, *_ = w.say(slice(None), 0, token=6)
            assert (obs["messages"][:, 1, 0, 0] == expected).all()


def test_drops_are_counter_based_and_depend_on_every_part_of_the_counter():
    key = np.array([1234, 1234, 99], np.uint64)
    base = uniform_hash(key, np.array([1, 1, 1]), np.array([5, 5, 5]), np.array([0, 0, 0]), np.array([[1], [1], [1]]))
    assert base[0, 0] == base[1, 0] and base[0, 0] != base[2, 0]
    for changed in ({"episode": 2}, {"tick": 6}, {"sender": 2}, {"receiver": 3}):
        args = {"episode": 1, "tick": 5, "sender": 0, "receiver": 1, **changed}
        other = uniform_hash(key[:1], np.array([args["episode"]]), np.array([args["tick"]]),
                             np.array([args["sender"]]), np.array([[args["receiver"]]]))
        assert other[0, 0] != base[0, 0], changed
    draws = uniform_hash(np.full(20000, 7, np.uint64), np.zeros(20000), np.arange(20000), np.zeros(20000),
                         np.ones((20000, 1)))
    assert 0.0 <= draws.min() and draws.max() < 1.0 and abs(draws.mean() - 0.5) < 0.01


def test_drops_follow_the_seed_and_not_the_batch():
    def deliveries(num_envs: int, seed: int, world: int) -> np.ndarray:
        envs = team_capture_v0.vector_env(num_envs=num_envs, agents_per_team=3)
        envs.reset(seed=seed)
        s = envs.state
        s.x[:] = np.arange(6) * 0.5
        s.z[:] = 0.0
        s.target_x[:], s.target_z[:] = s.x, s.z
        action = idle_actions((num_envs, 6))
        action["tool"][:] = TOOLS["send_message"]
        heard = []
        for _ in range(30):
            obs, *_ = envs.step(action)
            heard.append(obs["messages"][world, :, :, 2] == 0)
        return np.array(heard)

    alone = deliveries(1, 13, 0)
    np.testing.assert_array_equal(deliveries(5, 10, 3), alone)  # world 3 of a batch seeded 10 is seed 13
    assert not np.array_equal(deliveries(1, 14, 0), alone)
    assert 0 < (~alone).sum()  # some were dropped


def test_inboxes_are_emptied_by_reset():
    w = TeamWorld(2, message_drop_prob=0.0, max_cycles=3)
    w.place(0, 1, -27.0, 28.0)
    w.say(0, 0, token=5)
    obs, *_ = w.step(random_actions(np.random.default_rng(0), (2, 4), 2))
    obs, reward, terminated, truncated, info = w.step()
    assert truncated.all()
    obs, *_ = w.step()
    assert (obs["messages"] == 0).all() and (w.state.extra["inbox_token"] == -1).all()
