"""Invariants under random seeds and random action sequences (hypothesis, derandomized).

Checked after every step of every world: positions inside ±(half_size − agent_radius),
health and energy in [0, 100], resources never collected twice or created (collected
equals resources removed, the number placed never grows within an episode), and every
observation inside the observation space.
"""

from __future__ import annotations

import numpy as np
from conftest import full_batch, make_vec, nearest_rows, policy_actions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
B = 3


class Tracker:
    """Checks the invariants of a vector env's state, episode by episode."""

    def __init__(self, envs):
        self.envs = envs
        self.scenario = envs.unwrapped.scenario
        self.params = self.scenario.params
        self.R = self.scenario.slots.resources
        s = envs.unwrapped.state
        self.episode = s.episode.copy()
        self.res_total = s.res_total.copy()
        self.alive = s.ent_alive[:, :self.R].copy()
        self.collected = s.collected[:, 0].copy()

    def check(self, obs, info, reward=None) -> None:
        p, s = self.params, self.envs.unwrapped.state
        bound = np.float32(p.half_size - p.agent_radius)
        assert (np.abs(s.x) <= bound).all() and (np.abs(s.z) <= bound).all(), (s.x, s.z)
        assert np.isfinite(s.x).all() and np.isfinite(s.z).all()
        assert ((s.health >= 0) & (s.health <= p.max_health)).all(), s.health
        assert ((s.energy >= 0) & (s.energy <= p.max_energy)).all(), s.energy
        alive = s.ent_alive[:, :self.R]
        collected = s.collected[:, 0]
        same = s.episode == self.episode
        # within an episode: nothing placed, nothing revived, each removal is one collection
        assert (s.res_total[same] == self.res_total[same]).all()
        assert not (alive & ~self.alive)[same].any(), "a collected resource came back"
        assert (collected[same] >= self.collected[same]).all()
        # at all times: collected = placed − remaining, and the items are in the inventory
        assert (collected == s.res_total - alive.sum(1)).all(), (collected, s.res_total, alive.sum(1))
        assert (s.inventory[:, 0].sum(-1) == collected).all()
        assert (s.res_total <= self.R).all()
        assert (info["resources_remaining"] == alive.sum(1)).all()
        assert (info["resources_collected"] == collected).all()
        if reward is not None:  # +1 per collection, −0.01 per damage point (worlds not just reset)
            gained = np.where(same, collected - self.collected, 0)
            assert (reward[~same] == 0).all()
            assert (reward[same] >= gained[same] - 0.01 * 101 - 1e-6).all()
            assert (reward[same] <= gained[same] + 1e-6).all()
        assert self.envs.observation_space.contains(obs), {
            k: (v.min(), v.max()) for k, v in obs.items()}
        for i in range(self.envs.num_envs):
            assert self.envs.single_observation_space.contains({k: v[i] for k, v in obs.items()})
        self.episode = s.episode.copy()
        self.res_total = s.res_total.copy()
        self.alive = alive.copy()
        self.collected = collected.copy()


# one step of one world: tool, how to aim a move, raw parameters
step_strategy = st.tuples(
    st.integers(0, 6),  # tool
    st.sampled_from(["given", "resource", "hazard", "obstacle"]),  # move target
    st.floats(-25.0, 25.0, allow_nan=False, width=32),
    st.floats(-25.0, 25.0, allow_nan=False, width=32),
    st.floats(0.0625, 2.0, allow_nan=False, width=32),  # speed
    st.booleans(),  # collect the nearest shown resource, else the drawn row
    st.integers(0, 8),  # collect row
    st.floats(0.125, 50.0, width=32),  # query radius
    st.integers(0, 4),  # query filter
)


def build_actions(steps, obs, state):
    """The batch action from one drawn step per world, aimed with the current obs."""
    action = full_batch(B)
    x, z = obs["agent"][:, 0], obs["agent"][:, 1]
    res_row, has_res = nearest_rows(obs["resources"])
    haz_row, has_haz = nearest_rows(obs["hazards"])
    R = obs["resources"].shape[1]
    for b, (tool, aim, tx, tz, speed, nearest, row, radius, qfilter) in enumerate(steps):
        if aim == "resource" and has_res[b]:
            tx, tz = x[b] + obs["resources"][b, res_row[b], 2], z[b] + obs["resources"][b, res_row[b], 3]
        elif aim == "hazard" and has_haz[b]:
            tx, tz = x[b] + obs["hazards"][b, haz_row[b], 2], z[b] + obs["hazards"][b, haz_row[b], 3]
        elif aim == "obstacle" and (state.obst_r[b] > 0).any():
            j = int(np.argmax(state.obst_r[b] > 0))
            tx, tz = state.obst_x[b, j], state.obst_z[b, j]  # walk into it
        action["tool"][b] = tool
        action["move_to"][b] = (np.clip(tx, -25, 25), np.clip(tz, -25, 25), speed)
        action["collect"][b] = res_row[b] if nearest and has_res[b] else row % R
        action["query_world"]["radius"][b] = radius
        action["query_world"]["filter"][b] = qfilter
    return action


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), layout=st.sampled_from(["random", "classic"]),
       max_ticks=st.integers(5, 60),
       plan=st.lists(st.lists(step_strategy, min_size=B, max_size=B), min_size=1, max_size=25),
       repeats=st.integers(1, 6))
def test_invariants_under_drawn_action_sequences(seed, layout, max_ticks, plan, repeats):
    envs = make_vec(B, layout=layout, max_ticks=max_ticks)
    obs, info = envs.reset(seed=seed)
    tracker = Tracker(envs)
    tracker.check(obs, info)
    for steps in plan * repeats:  # repeating the plan keeps walking (and collecting) further
        action = build_actions(steps, obs, envs.unwrapped.state)
        obs, reward, terminated, truncated, info = envs.step(action)
        tracker.check(obs, info, reward)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), action_seed=st.integers(0, 2**32 - 1),
       num_resources=st.integers(1, 12), num_hazards=st.integers(0, 6), num_obstacles=st.integers(0, 14),
       half_size=st.sampled_from([12.0, 25.0, 40.0]))
def test_invariants_under_long_random_runs(seed, action_seed, num_resources, num_hazards, num_obstacles,
                                           half_size):
    envs = make_vec(B, num_resources=num_resources, num_hazards=num_hazards, num_obstacles=num_obstacles,
                    half_size=half_size, max_ticks=80)
    obs, info = envs.reset(seed=seed)
    tracker = Tracker(envs)
    tracker.check(obs, info)
    rng = np.random.default_rng(action_seed)
    for _ in range(150):
        obs, reward, terminated, truncated, info = envs.step(policy_actions(rng, obs, half_size))
        tracker.check(obs, info, reward)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), rows=st.lists(st.integers(0, 8), min_size=1, max_size=40))
def test_collecting_the_same_rows_again_never_counts_twice(seed, rows):
    """Agents standing on resources collect drawn rows, repeats included."""
    envs = make_vec(B, num_resources=9, max_ticks=1000)
    obs, info = envs.reset(seed=seed)
    s = envs.unwrapped.state
    s.ent_x[:, :9] = s.x  # every resource within reach
    s.ent_z[:, :9] = s.z + np.linspace(-1.9, 1.9, 9, dtype=np.float32)
    tracker = Tracker(envs)
    taken = [set() for _ in range(B)]
    placed = s.ent_alive[:, :9].copy()
    for row in rows:
        action = full_batch(B, tool=1)
        action["collect"][:] = row
        obs, reward, terminated, truncated, info = envs.step(action)
        for b in range(B):
            first = placed[b, row] and row not in taken[b]
            assert reward[b] == (1.0 if first else 0.0) or terminated[b] or s.health[b, 0] < 100
            assert obs["last_action"][b, 1] == (0 if first else 2)
            taken[b].add(row)
        tracker.check(obs, info, reward)
        if terminated.any():
            break
