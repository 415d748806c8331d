"""The league (training/league.py): team capture learnt against a pool of opponents."""

from __future__ import annotations

import csv
import json

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

from arena_envs import team_capture_v0
from arena_envs.scripted import ScriptedCaptureTeam
from arena_envs.training import evaluate, ppo, train
from arena_envs.training import league as leagues
from arena_envs.training.common import CONFIG_DIR, ModelAgent, agent_factory, load_config, play

HEADLINE = CONFIG_DIR / "ppo" / "team_capture.yaml"


def small_config(path, checkpoint_every: int = 10**9, **league):
    """The headline league config, shrunk: 4 worlds of 40 ticks, an update every 8 decisions of 2 ticks."""
    config = yaml.safe_load(HEADLINE.read_text())
    config["env_kwargs"] = {**config.get("env_kwargs", {}), "max_ticks": 40}
    config["ppo"].update(n_steps=8, batch_size=64, n_epochs=1)
    config["policy_kwargs"]["net_arch"] = [32, 32]
    config.update(n_envs=4, eval_every=0, checkpoint_every=checkpoint_every)
    config["league"].update(action_repeat=2, snapshot_every=64, **league)  # 64 decisions: one update
    path.write_text(yaml.safe_dump(config))
    return str(path)


def league_env(num_envs: int, seed: int = 0, **league) -> leagues.League:
    config = {**load_config("team_capture_v0", HEADLINE), "seed": seed}
    config["league"] = {**config["league"], **league}
    native = team_capture_v0.vector_env(num_envs, autoreset_mode="SameStep", max_ticks=60)
    return leagues.make_league(native, config)


def fingerprint(member) -> float:
    if not isinstance(member, leagues.Snapshot):
        return 0.0
    return float(sum(p.double().sum() for p in member.net.parameters()))


def test_an_opponent_plays_a_whole_episode_with_the_same_weights(tmp_path, monkeypatch):
    """Inside the trainer, whose updates change the learner while episodes run across them, every
    world's red team keeps one member and that member's weights from an episode's first tick to its
    last (PufferLib #620); opponents change between episodes."""
    seen = []  # per tick: (ticks of every world, opponent of every world, fingerprint of its weights)
    red_actions = leagues.League.red_actions

    def recorded(self):
        prints = [fingerprint(self.members[m]) for m in self.opponent]
        seen.append((self.native.unwrapped.state.tick.copy(), self.opponent.copy(), np.array(prints)))
        return red_actions(self)

    monkeypatch.setattr(leagues.League, "red_actions", recorded)
    config = small_config(tmp_path / "c.yaml", sampling="uniform", opponents=["scripted"])
    train.train(["team_capture_v0", "--config", config, "--out", str(tmp_path / "run"), "--timesteps", "1280",
                 "--no-progress"])
    ticks, opponents, prints = (np.array(column) for column in zip(*seen, strict=True))
    same_episode = ticks[1:] >= ticks[:-1]  # (tick, world): the next tick continues this episode (or it waits)
    assert same_episode.sum() > 0.9 * same_episode.size
    assert (opponents[1:] == opponents[:-1])[same_episode].all()
    assert (prints[1:] == prints[:-1])[same_episode].all()
    assert (opponents[1:] != opponents[:-1])[~same_episode].any()  # new episodes do draw anew
    snapshot_ticks = (opponents > 0) & (ticks > 0)
    assert snapshot_ticks.sum() > 100 and len(np.unique(prints[snapshot_ticks])) > 3


def test_snapshots_are_saved_with_the_run_and_rejoin_the_pool_on_resume(tmp_path):
    out = tmp_path / "run"
    config = small_config(tmp_path / "c.yaml", checkpoint_every=64)
    base = ["team_capture_v0", "--config", config, "--out", str(out), "--no-progress"]
    train.train([*base, "--timesteps", "192"])  # 3 updates of 64 decisions
    folder = out / "league"
    assert sorted(p.name for p in folder.glob("snapshot_*.pt")) == [f"snapshot_{s}.pt" for s in (128, 192, 64)]
    for steps in (64, 128, 192):  # each is the learner as it was then (checkpoint_every = snapshot_every)
        saved = torch.load(folder / f"snapshot_{steps}.pt", weights_only=True)
        learner = torch.load(out / "checkpoints" / f"ppo_{steps}_steps.pt", weights_only=False)["agent"]
        for key, value in learner.items():
            torch.testing.assert_close(saved[key], value, rtol=0, atol=0)
    first = json.loads((folder / "pool.json").read_text())
    assert list(first["members"]) == ["scripted", "random", "snapshot_64", "snapshot_128", "snapshot_192"]
    assert sum(m["games"] for m in first["members"].values()) > 0

    train.train([*base, "--timesteps", "256", "--resume"])
    resumed = json.loads((folder / "pool.json").read_text())
    assert list(resumed["members"]) == [*first["members"], "snapshot_256"]
    for name, member in first["members"].items():  # the results carried on from where they were
        assert resumed["members"][name]["games"] >= member["games"]

    # arena-eval plays the model as blue (holding its decisions as trained) and counts draws apart
    summary = evaluate.evaluate([str(out), "team_capture_v0", "--episodes", "4"])
    assert "| draw" in (out / "eval.md").read_text()
    for row in summary.values():
        assert row["success_mean"] + row["draw_mean"] <= 1.0
    assert summary["scripted vs scripted"]["draw_mean"] > 0  # 40 ticks: nobody scores


def test_pfsp_draws_the_opponents_the_learner_loses_to():
    league = league_env(4000, snapshot_every=0, max_snapshots=1, pfsp_power=2.0, min_weight=0.05)
    net = ppo.Agent(league.encoding.observation_space.shape[0], league.encoding.action_space.nvec.tolist(), [8])
    for steps in (1, 2):
        league.add_snapshot(net, steps)
    league.results[:] = [0.0, 1.0, 0.5, 0.5]  # scripted beats the learner, random never does
    expected = np.array([1.0, 0.05, 0.0, 0.25]) / 1.3  # (1 - p)^2, at least 0.05; snapshot_1 is retired
    np.testing.assert_allclose(league.probabilities(), expected)
    league.draw(np.arange(league.num_envs))
    np.testing.assert_allclose(np.bincount(league.opponent, minlength=4) / league.num_envs, expected, atol=0.03)

    league.config.sampling = "uniform"
    np.testing.assert_allclose(league.probabilities(), [1 / 3, 1 / 3, 0, 1 / 3])

    # results: a running average, each game weighing ``rate``; k games at once as k updates by their mean
    league.config.rate = 0.5
    league.opponent[:3] = [0, 0, 1]
    league.record(np.arange(3), np.array([1.0, 1.0, 0.5]))
    np.testing.assert_allclose(league.results[:2], [0.25 * 0.0 + 0.75 * 1.0, 0.5 * 1.0 + 0.5 * 0.5])
    np.testing.assert_array_equal(league.games, [2, 1, 0, 0])


def test_bad_league_sections_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown keys in the league section"):
        league_env(2, snapshots=3)
    with pytest.raises(ValueError, match="pfsp or uniform"):
        league_env(2, sampling="elo")
    with pytest.raises(ValueError, match="action_repeat"):
        league_env(2, action_repeat=0)
    config = {**load_config("team_capture_v0", HEADLINE), "seed": 0, "num_workers": 2}
    with pytest.raises(ValueError, match="num_workers must be 1"):
        leagues.make_league(team_capture_v0.vector_env(2, autoreset_mode="SameStep"), config)


def scripted_episodes(num_envs: int, seed: int, ticks: int, snapshot: bool = False, **league):
    """A league of ``num_envs`` worlds with the scripted team as blue: per step, observations, rewards,
    ends and opponents (with ``snapshot``, a snapshot of an untrained learner joins the pool)."""
    env = league_env(num_envs, seed, **league)
    torch.manual_seed(seed)
    if snapshot:
        env.add_snapshot(ppo.Agent(env.encoding.observation_space.shape[0], env.encoding.action_space.nvec.tolist(),
                                   [8]), 0)
    blue = ScriptedCaptureTeam(env.scenario.params)
    obs, _ = env.reset(seed=seed)
    trace = []
    for _ in range(ticks):
        obs, reward, terminated, truncated, info = env.step(blue.act(obs))
        trace.append((obs["agent"].copy(), reward.copy(), terminated.copy(), env.opponent.copy()))
    return trace


def test_league_worlds_are_deterministic_and_batch_invariant():
    """A world plays (and draws its opponents) alike in any batch; the same seed plays the same."""
    pool = {"opponents": ["scripted", "scripted"], "snapshot_every": 0, "sampling": "uniform", "action_repeat": 1}
    small, large = scripted_episodes(3, 5, 130, **pool), scripted_episodes(5, 5, 130, **pool)
    assert any(len(np.unique(opponents)) > 1 for *_, opponents in small)
    for a, b in zip(small, large, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y[:3])
    once, again = scripted_episodes(3, 5, 40, snapshot=True), scripted_episodes(3, 5, 40, snapshot=True)
    assert len(np.unique([opponents for *_, opponents in once])) == 3  # scripted, random and the snapshot played
    for a, b in zip(once, again, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)


def test_the_learner_holds_each_decision_for_action_repeat_ticks():
    """Trained with decisions held for k ticks, the model is evaluated the same way."""
    native = team_capture_v0.vector_env(2)
    config = load_config("team_capture_v0", HEADLINE)
    encoding = leagues.FlatEncoding.for_env(native, **config["encoding"])
    torch.manual_seed(0)
    net = ppo.Agent(encoding.observation_space.shape[0], encoding.action_space.nvec.tolist(), [8])
    model = ModelAgent(net, encoding, deterministic=False, action_repeat=3)
    obs, _ = native.reset(seed=0)
    blue = []
    for _ in range(9):
        actions = model.act({k: v[:, :2] for k, v in obs.items()})
        blue.append(actions["move_to"])
        obs, *_ = native.step({k: np.concatenate([v, v], 1) if not isinstance(v, dict)
                               else {kk: np.concatenate([vv, vv], 1) for kk, vv in v.items()}
                               for k, v in actions.items()})
    for tick in range(9):  # held between decisions, a new one at ticks 0, 3, 6
        assert np.array_equal(blue[tick], blue[tick - tick % 3])
    assert not np.array_equal(blue[0], blue[3]) and not np.array_equal(blue[3], blue[6])


def test_agent_index_tells_teammates_apart():
    """Teammates seeing alike (a shared policy would send them to the same place) differ by their
    number in the team; rows are agents in order, both teams alike."""
    native = team_capture_v0.vector_env(2, agents_per_team=3)
    obs, _ = native.reset(seed=0)
    plain = leagues.FlatEncoding.for_env(native)
    indexed = leagues.FlatEncoding.for_env(native, agent_index=True)
    rows = leagues.merge_agents(obs, 6)
    flat = indexed.observe(rows)
    assert flat.shape == (12, plain.observation_space.shape[0] + 3) == (12, indexed.observation_space.shape[0])
    np.testing.assert_array_equal(flat[:, :-3], plain.observe(rows))
    np.testing.assert_array_equal(flat[:, -3:], np.tile(np.eye(3), (4, 1)))  # blue 1 2 3, red 1 2 3, ...
    assert indexed.observation_space.contains(flat[0])
    with pytest.raises(ValueError, match="team scenarios"):
        leagues.FlatEncoding.for_env(gym.make_vec("arena_envs/Foraging-v0", 1), agent_index=True)


def test_a_short_league_run_learns(tmp_path):
    """A run that fails when learning breaks: against the random team in episodes of 150 ticks (5
    decisions: a walk to a point and a capture barely fit), 20k decisions take blue from winning
    a third of the games to nearly all (0.31 and 1.0, return 4.6 and 24.9, in the run this was
    written with)."""
    config = yaml.safe_load(HEADLINE.read_text())
    config["env_kwargs"]["max_ticks"] = 150
    config.update(n_envs=32, eval_every=0, checkpoint_every=10**9)
    config["ppo"].update(n_steps=16, batch_size=256)
    config["league"].update(opponents=["random"], snapshot_every=0)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "run"
    train.train(["team_capture_v0", "--config", str(tmp_path / "c.yaml"), "--out", str(out), "--timesteps", "20480",
                 "--no-progress"])
    rows = [r for r in csv.DictReader((out / "progress.csv").open()) if r["rollout/success_rate"]]
    first, last = (float(rows[i]["rollout/success_rate"]) for i in (0, -1))
    assert first < 0.5 and last > 0.85, (first, last)
    assert float(rows[-1]["rollout/ep_rew_mean"]) > float(rows[0]["rollout/ep_rew_mean"]) + 10


@pytest.mark.parametrize("every, on_events, low, high", [(1, False, 0.8, 1.0), (30, False, 0.0, 0.05),
                                                         (30, True, 0.8, 1.0)])
def test_beating_the_scripted_team_takes_timely_decisions(every, on_events, low, high):
    """What the league's config and guide say of the game: a hand-made team (each agent keeps the
    points of its side) wins ~89% of the 200 held-out games against the scripted team deciding
    every tick, none with its decisions held 30 ticks, and as many deciding only on team capture's
    events (at most 30 ticks apart: the learner's decide_on_events)."""
    from team_capture_helpers import SidesTeam

    result = play(lambda envs: SidesTeam(envs, every, on_events), "team_capture_v0", 200, 10_000,
                  {"agents_per_team": 2}, agent_factory("scripted", "team_capture_v0"))
    assert low <= result["success"].mean() <= high, result["success"].mean()


def test_a_point_changing_hands_or_an_arrival_is_an_event_and_a_capture_starting_is_not():
    """team_capture.decision_events on a real game: red walks onto a point blue owns. Its capture
    starting ends no decision (the learner's step away from a contested point would end on it,
    and most seeds then learnt to stay), the point changing hands does, and so does a blue
    agent stopping; a blue agent merely walking on does not."""
    from team_capture_helpers import POINTS, TOOLS, idle_actions

    from arena_envs.team_capture import decision_events, decision_view, join_teams, split_teams

    native = team_capture_v0.vector_env(1, agents_per_team=1, max_ticks=1000)
    obs, _ = native.reset(seed=0)
    state = native.unwrapped.state
    state.extra["point_owner"][0, POINTS["A"]] = 0  # blue owns A; red stands next to it
    state.x[0, 1], state.z[0, 1] = -15.0 + 5.0, -15.0
    blue, red = idle_actions((1, 1)), idle_actions((1, 1))
    obs, *_ = native.step(join_teams(blue, red))  # observed as placed
    red["tool"][:], red["move_to"][0, 0] = TOOLS["move_to"], (-15.0, -15.0, 1.0)
    blue["tool"][:], blue["move_to"][0, 0] = TOOLS["move_to"], (-25.0, 10.0, 1.0)  # a short walk
    events, taking_since = [], None
    view = decision_view(split_teams(obs, 1)[0])
    for tick in range(200):
        obs, *_ = native.step(join_teams(blue, red))
        after = decision_view(split_teams(obs, 1)[0])
        if decision_events(view, after)[0]:
            events.append(("hands" if (view[0] != after[0]).any() else "arrived", tick))
        if taking_since is None and obs["points"][0, 0, POINTS["A"], 6] > 0:
            taking_since = tick
        view = after
    (first, arrived), (second, changed) = events
    assert (first, second) == ("arrived", "hands"), events
    assert taking_since is not None and taking_since not in (arrived, changed) and taking_since < changed


class ClockTeam:
    """Blue agents walking to a point that changes every 7 ticks, events or not: how long each
    decision is held shows in where they go. Decides each time it is asked, or holds as
    ``held`` (a pretrained.HeldDecisions) says."""

    def __init__(self, envs, held=None):
        self.params, self.held = envs.unwrapped.scenario.params, held

    def act(self, obs: dict) -> dict:
        from team_capture_helpers import TOOLS, idle_actions

        B, N = obs["agent"].shape[:2]
        tick = self.params.max_ticks - obs["time_left"][:, 0, 0].astype(np.int64)
        point = (tick[:, None] // 7 + np.arange(N)) % 5
        actions = idle_actions((B, N))
        actions["tool"][:] = TOOLS["move_to"]
        rows = np.arange(B)[:, None], np.arange(N)
        actions["move_to"][..., 0] = obs["agent"][..., 0] + obs["points"][rows + (point,)][..., 0]
        actions["move_to"][..., 1] = obs["agent"][..., 1] + obs["points"][rows + (point,)][..., 1]
        return actions if self.held is None else self.held(obs, actions)


@pytest.mark.parametrize("team", ["sides", "clock"])
def test_the_league_decides_on_events_as_the_held_agent_plays(team):
    """With decide_on_events a league step is one decision per world, however many ticks it took
    (worlds whose event came pause for the others); a team deciding by the same rule outside the
    league (pretrained.HeldDecisions, as the exported policy plays) plays the very same games."""
    from team_capture_helpers import SidesTeam

    from arena_envs.pretrained import HeldDecisions

    worlds, seed, ticks = 6, 10_000, 400
    pool = {"opponents": ["scripted"], "snapshot_every": 0, "sampling": "uniform", "action_repeat": 30,
            "decide_on_events": True, "shaping": 0.0}
    config = {**load_config("team_capture_v0", HEADLINE), "seed": seed}
    config["league"] = {**config["league"], **pool}
    native = team_capture_v0.vector_env(worlds, autoreset_mode="SameStep", max_ticks=ticks)
    env = leagues.make_league(native, config)
    blue = SidesTeam(env) if team == "sides" else ClockTeam(env)  # deciding when asked: the league holds
    obs, _ = env.reset(seed=seed)
    margin, done, decisions, elapsed = np.zeros(worlds), np.zeros(worlds, bool), 0, []
    while not done.all():
        before = native.unwrapped.state.tick.copy()
        obs, reward, terminated, truncated, info = env.step(blue.act(obs))
        elapsed.append(np.where(done, 0, native.unwrapped.state.tick - before))
        margin += reward[:, 0] * ~done
        decisions += 1
        done |= (terminated | truncated)[:, 0]
    elapsed = np.array(elapsed)
    assert decisions < ticks / 5 and elapsed.max() <= 30  # few decisions, none held past action_repeat
    assert len(np.unique(elapsed[elapsed > 0])) > 5  # decisions of many lengths: they end on events

    def held(envs):
        if team == "sides":
            return SidesTeam(envs, 30, on_events=True)
        return ClockTeam(envs, HeldDecisions(30, ticks, on_events=True))

    scripted = agent_factory("scripted", "team_capture_v0")
    played = play(held, "team_capture_v0", worlds, seed, {"max_ticks": ticks}, scripted)
    np.testing.assert_allclose(margin, played["return"])
    assert (played["return"] != 0).all()


def test_a_decision_held_on_events_never_outlives_its_episode():
    """Idle blue agents in episodes of 7 ticks: nothing happens, so no event ends a decision, yet
    each episode starts with one: the league's steps are one episode each, and the held agent
    takes a new decision on each episode's first tick."""
    from team_capture_helpers import TOOLS, idle_actions

    from arena_envs.pretrained import HeldDecisions

    config = {**load_config("team_capture_v0", HEADLINE), "seed": 0}
    config["league"] = {**config["league"], "opponents": ["random"], "snapshot_every": 0, "action_repeat": 30,
                        "decide_on_events": True}
    native = team_capture_v0.vector_env(3, autoreset_mode="SameStep", max_ticks=7)
    env = leagues.make_league(native, config)
    env.reset(seed=0)
    for _ in range(3):
        _, _, terminated, truncated, info = env.step(idle_actions((3, 2)))
        assert truncated.all() and not terminated.any() and (native.unwrapped.state.tick == 0).all()

    held = HeldDecisions(30, 7, on_events=True)
    native = team_capture_v0.vector_env(3, max_ticks=7)  # NEXT_STEP: a new episode's first tick follows the end
    obs, _ = native.reset(seed=0)
    said = []
    for call in range(16):
        actions = idle_actions((3, 2))
        actions["tool"][:], actions["send_message"][..., 0] = TOOLS["send_message"], call
        said.append(held({k: v[:, :2] for k, v in obs.items()}, actions)["send_message"][0, 0, 0])
        obs, *_ = native.step({k: (np.concatenate([v, v], 1) if not isinstance(v, dict) else
                                   {kk: np.concatenate([vv, vv], 1) for kk, vv in v.items()})
                               for k, v in idle_actions((3, 2)).items()})
    assert said == [0] * 8 + [8] * 8  # 7 ticks and the reset step: 8 calls an episode



def test_one_world_holds_its_decisions_as_it_does_in_a_batch():
    """A chat match's controller gives the held agent one world's team, (N, ...) arrays: it holds
    them as that world's rows of a batch are held."""
    from arena_envs.pretrained import HeldDecisions

    native = team_capture_v0.vector_env(2, max_ticks=80)
    obs, _ = native.reset(seed=3)
    batch, worlds = HeldDecisions(30, 80, on_events=True), [HeldDecisions(30, 80, on_events=True) for _ in range(2)]
    rng = np.random.default_rng(0)
    for _ in range(80):
        blue = {k: v[:, :2] for k, v in obs.items()}
        actions = ClockTeam(native).act(blue)
        actions["move_to"][..., :2] += rng.normal(size=(2, 2, 2)).astype(np.float32)  # a new choice each tick
        held = batch(blue, actions)
        for b, world in enumerate(worlds):
            alone = world({k: v[b] for k, v in blue.items()}, {k: (v[b] if not isinstance(v, dict) else
                                                                   {kk: vv[b] for kk, vv in v.items()})
                                                               for k, v in actions.items()})
            np.testing.assert_array_equal(alone["move_to"], held["move_to"][b])
        both = {k: (np.concatenate([v, v], 1) if not isinstance(v, dict)
                    else {kk: np.concatenate([vv, vv], 1) for kk, vv in v.items()}) for k, v in held.items()}
        obs, *_ = native.step(both)
