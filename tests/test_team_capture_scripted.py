"""The scripted Team Capture team: it beats a random team, splits up and talks."""

from __future__ import annotations

import numpy as np
from team_capture_helpers import TOOLS, TeamWorld

from arena_envs import team_capture_v0
from arena_envs.scripted import ScriptedCaptureTeam
from arena_envs.team_capture import join_teams, split_teams


def pick(mine: np.ndarray, scripted, other):
    """The scripted action where ``mine`` (B, A) is true, the other one elsewhere."""
    if isinstance(scripted, dict):
        return {k: pick(mine, scripted[k], other[k]) for k in scripted}
    return np.where(mine.reshape(mine.shape + (1,) * (scripted.ndim - 2)), scripted, other)


def play_matches(num_matches: int, agents_per_team: int, seed: int) -> np.ndarray:
    """Scripted against random in ``num_matches`` seeded worlds at once, the scripted team blue in
    the first half and red in the second; returns (scripted score, random score) per match."""
    N = agents_per_team
    envs = team_capture_v0.vector_env(num_envs=num_matches, agents_per_team=N)
    params = envs.scenario.params
    blue, red = ScriptedCaptureTeam(params), ScriptedCaptureTeam(params)
    obs, _ = envs.reset(seed=seed)
    envs.action_space.seed(seed)
    scripted_blue = np.arange(num_matches) < num_matches // 2
    finished = np.zeros(num_matches, bool)
    scores = np.zeros((num_matches, 2))
    while not finished.all():
        blue_obs, red_obs = split_teams(obs, N)
        scripted = join_teams(blue.act(blue_obs), red.act(red_obs))
        actions = envs.action_space.sample()  # random agents pick any valid action
        mine = np.repeat(scripted_blue[:, None], 2 * N, 1) == (np.arange(2 * N) < N)
        obs, reward, terminated, truncated, info = envs.step(pick(mine, scripted, actions))
        ended = (terminated[:, 0] | truncated[:, 0]) & ~finished
        both = np.stack([info["blue_score"], info["red_score"]], 1)
        scores[ended] = np.where(scripted_blue[ended, None], both[ended], both[ended, ::-1])
        finished |= ended
    return scores


def test_the_scripted_team_beats_a_random_team_in_95_percent_of_200_matches():
    scores = play_matches(200, agents_per_team=2, seed=2024)
    wins = scores[:, 0] > scores[:, 1]
    assert wins.mean() >= 0.95, (wins.mean(), scores[~wins])
    assert wins[:100].mean() >= 0.95 and wins[100:].mean() >= 0.95  # on either side
    assert (scores[:, 0] >= 100).mean() >= 0.95  # by reaching 100, not on time


def test_teammates_announce_their_points_and_split_up():
    def targets(drop: float) -> tuple[np.ndarray, np.ndarray]:
        w = TeamWorld(16, agents_per_team=2, message_drop_prob=drop, seed=1)
        for b in range(16):
            w.place(b, 0, -25.0, 1.0 + 0.1 * b)  # side by side: the same point is nearest for both
            w.place(b, 1, -25.0, 1.0 + 0.1 * b)
        team = ScriptedCaptureTeam(w.scenario.params)
        tools = []
        for _ in range(6):
            blue_obs, _ = split_teams(w.obs, 2)
            actions = team.act(blue_obs)
            tools.append(actions["tool"].copy())
            w.step(join_teams(actions, split_teams(w.actions(), 2)[1]))
        return team.target, np.array(tools)

    talking, tools = targets(0.0)
    assert (talking[:, 0] != talking[:, 1]).all()  # heard each other: different points
    assert (tools[1:] == TOOLS["send_message"]).any(0).all()  # everyone announced
    deaf, _ = targets(1.0)
    assert (deaf[:, 0] == deaf[:, 1]).all()  # every message lost: both go for the nearest point


def test_the_scripted_team_plays_one_world_unbatched():
    env = team_capture_v0.parallel_env(agents_per_team=3)
    obs, _ = env.reset(seed=0)
    team = ScriptedCaptureTeam(env.scenario.params)
    red = env.possible_agents[3:]
    for _ in range(200):
        red_obs = {k: np.stack([obs[a][k] for a in red]) for k in obs[red[0]]}
        actions = team.act(red_obs)
        obs, rewards, *_ = env.step({a: {k: (v[i] if not isinstance(v, dict) else {q: w[i] for q, w in v.items()})
                                         for k, v in actions.items()} for i, a in enumerate(red)})
    assert env.scenario.info(env.world)["red_points"][0] >= 2
