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


def test_the_pool_keeps_the_learners_result_against_the_opponent_that_played():
    """Blue (the learner) beats every world played by random, loses every one played by scripted and
    draws one: random's entry rises by exactly the wins, scripted's falls by the losses, and PFSP
    then draws scripted (the opponent the learner loses to) more often than random."""
    from team_capture_helpers import idle_actions

    worlds = 12
    config = {**load_config("team_capture_v0", HEADLINE), "seed": 3}
    config["league"] = {**config["league"], "opponents": ["scripted", "random"], "snapshot_every": 0,
                        "sampling": "uniform", "action_repeat": 1, "decide_on_events": False, "shaping": 0.0}
    native = team_capture_v0.vector_env(worlds, autoreset_mode="SameStep", max_ticks=5)
    env = leagues.make_league(native, config)
    env.reset(seed=3)
    played = env.opponent.copy()
    assert set(played.tolist()) == {0, 1}
    blue = np.where(played == 1, 7.0, 2.0)  # random loses 7:2, scripted wins 7:2
    red = np.where(played == 1, 2.0, 7.0)
    blue[-1] = red[-1] = 4.0  # a draw
    for _ in range(4):
        env.step(idle_actions((worlds, 2)))
    native.unwrapped.state.extra["score"][:] = np.stack([blue, red], 1)  # no point is reached in 5 ticks
    _, _, _, truncated, info = env.step(idle_actions((worlds, 2)))
    assert truncated.all() and (info["final_info"]["red_score"] == red).all()  # these were the final scores
    outcome = np.where(blue > red, 1.0, np.where(blue < red, 0.0, 0.5))  # the learner's side: win 1, draw 0.5
    for member in (0, 1):
        games = outcome[played == member]
        keep = (1 - env.config.rate) ** len(games)
        assert env.results[member] == pytest.approx(keep * 0.5 + (1 - keep) * games.mean(), abs=1e-12)
        assert env.games[member] == len(games)
    assert env.results[0] < 0.5 < env.results[1]  # scripted beat the learner, random lost to it
    env.config.sampling = "pfsp"
    chance = env.probabilities()
    assert chance[0] > chance[1]  # the opponent the learner loses to is drawn more


def shaped_league(shaping: float, seed: int = 4) -> leagues.League:
    """A league whose one capture point lies on blue's spawn (blue captures it standing still) with
    episodes of 7 ticks and decisions of 5: the second decision's episode ends on its second tick,
    and the world's next episode plays the held decision's last 3 ticks."""
    config = {**load_config("team_capture_v0", HEADLINE), "seed": seed}
    config["league"] = {**config["league"], "opponents": ["scripted"], "snapshot_every": 0, "action_repeat": 5,
                        "decide_on_events": False, "shaping": shaping}
    native = team_capture_v0.vector_env(3, autoreset_mode="SameStep", max_ticks=7, capture_points=((-25.0, 0.0),),
                                        point_names=("home",), spawn_spread=1.0)
    return leagues.make_league(native, config)


def test_shaping_adds_the_discounted_change_of_blues_capture_progress_and_nothing_past_an_end():
    """Potential-based shaping (Ng et al. 1999): with phi = shaping x (blue's capture progress minus
    red's), a step adds gamma phi(next) - phi(this), and phi(next) is 0 when the episode ended, even
    when the world's next episode has already made progress. Checked against an unshaped league
    playing the very same games."""
    from team_capture_helpers import idle_actions

    shaping = 3.0
    plain, shaped = shaped_league(0.0), shaped_league(shaping)
    gamma = shaped.gamma
    progress = lambda obs: (obs["points"][:, 0, :, 5] - obs["points"][:, 0, :, 6]).sum(-1, np.float64)  # noqa: E731
    before, _ = shaped.reset(seed=4)
    plain.reset(seed=4)
    rises = carried = 0
    for _ in range(6):
        obs, reward, terminated, truncated, _ = shaped.step(idle_actions((3, 2)))
        _, unshaped, *_ = plain.step(idle_actions((3, 2)))
        ended = (terminated | truncated)[:, 0]
        phi, phi_next = shaping * progress(before), shaping * progress(obs)
        expected = gamma * np.where(ended, 0.0, phi_next) - phi
        np.testing.assert_allclose(reward - unshaped, np.repeat(expected[:, None], 2, 1), rtol=0, atol=1e-9)
        rises += int(((phi_next > phi) & ~ended).sum())  # blue's capture went on
        carried += int((ended & (phi_next > 0)).sum())  # an end, the next episode already under way
        before = obs
    assert rises > 0 and carried > 0


def test_a_resumed_league_has_every_members_result_games_and_weights(tmp_path):
    """What pool.json holds comes back on resume as it was: each member's running result (PFSP's
    weights) and games, and each snapshot's weights."""
    env = league_env(2, snapshot_every=64)
    size = env.encoding.observation_space.shape[0], env.encoding.action_space.nvec.tolist(), [8]
    agent = ppo.Agent(*size)
    assert leagues.attach(env, agent, tmp_path, resume=False) is env
    leagues.after_update(env, agent, 64)  # snapshot_64 joins
    env.results[:] = [0.125, 0.875, 0.3]
    env.games[:] = [7, 3, 11]
    leagues.after_update(env, agent, 70)  # no snapshot due: the pool is written as it is
    resumed = league_env(2, snapshot_every=64)
    leagues.attach(resumed, ppo.Agent(*size), tmp_path, resume=True)
    assert [m.name for m in resumed.members] == ["scripted", "random", "snapshot_64"]
    np.testing.assert_array_equal(resumed.results, [0.125, 0.875, 0.3])
    np.testing.assert_array_equal(resumed.games, [7, 3, 11])
    np.testing.assert_array_equal(resumed.probabilities(), env.probabilities())
    for mine, theirs in zip(resumed.members[2].net.parameters(), env.members[2].net.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)
    assert resumed.next_snapshot == 128


def test_every_change_of_hands_of_every_point_is_an_event_at_2v2():
    """team_capture.decision_events at 2v2, each world of a batch changing one point's owner one
    way (neutral to either team, either team to the other) and one world changing nothing: each
    change is an event for both teams' views, on every point, and nothing else is."""
    from team_capture_helpers import BLUE, NEUTRAL, RED, idle_actions

    from arena_envs.team_capture import decision_events, decision_view, join_teams, split_teams

    changes = [(NEUTRAL, BLUE), (NEUTRAL, RED), (BLUE, RED), (RED, BLUE)]
    cases = [(point, was, now) for point in range(5) for was, now in changes]
    worlds = len(cases) + 1  # the last world: nothing changes
    native = team_capture_v0.vector_env(worlds, agents_per_team=2, max_ticks=1000)
    native.reset(seed=0)
    owner = native.unwrapped.state.extra["point_owner"]
    idle = join_teams(idle_actions((worlds, 2)), idle_actions((worlds, 2)))
    for world, (point, was, _) in enumerate(cases):
        owner[world, point] = was
    obs, *_ = native.step(idle)  # nobody stands in a zone: the owners stay as set
    views = [decision_view(team) for team in split_teams(obs, 2)]
    for world, (point, _, now) in enumerate(cases):
        owner[world, point] = now
    obs, *_ = native.step(idle)
    for before, team in zip(views, split_teams(obs, 2), strict=True):
        after = decision_view(team)
        assert decision_events(before, after).tolist() == [True] * len(cases) + [False]
        assert decision_events(after, after).tolist() == [False] * worlds


def test_an_arrival_of_either_teammate_is_an_event_at_2v2():
    """team_capture.decision_events at 2v2: in each world one agent walks a short way while its
    teammate stands; the tick it stops (the world's own state says when) is the team's one event,
    whichever teammate it is; the other team's agents arriving is no event for it."""
    from team_capture_helpers import TOOLS, idle_actions

    from arena_envs.team_capture import decision_events, decision_view, join_teams, split_teams

    walker = np.array([0, 1, 2, 3])  # blue 1, blue 2, red 1, red 2: one agent walks in each world
    native = team_capture_v0.vector_env(4, agents_per_team=2, max_ticks=1000)
    obs, _ = native.reset(seed=1)
    state = native.unwrapped.state
    actions = join_teams(idle_actions((4, 2)), idle_actions((4, 2)))
    rows = np.arange(4)
    actions["tool"][rows, walker] = TOOLS["move_to"]
    actions["move_to"][rows, walker] = np.stack([state.x[rows, walker] + 4.0, state.z[rows, walker],
                                                 np.ones(4)], 1)  # 4 m at full speed: a few ticks
    views = [decision_view(team) for team in split_teams(obs, 2)]
    events = [[], []]  # per team: the ticks of its events, per world
    stopped = []  # the ticks each walker stopped on, per world
    for tick in range(40):
        moving = state.moving[rows, walker].copy()
        obs, *_ = native.step(actions)
        stopped += [(world, tick) for world in np.flatnonzero(moving & ~state.moving[rows, walker])]
        for team, (before, now) in enumerate(zip(views, split_teams(obs, 2), strict=True)):
            after = decision_view(now)
            events[team] += [(world, tick) for world in np.flatnonzero(decision_events(before, after))]
            views[team] = after
    assert len(stopped) == 4  # every walker arrived once
    assert events[0] == [(w, t) for w, t in stopped if walker[w] < 2]  # blue 1's and blue 2's arrivals
    assert events[1] == [(w, t) for w, t in stopped if walker[w] >= 2]  # red 1's and red 2's
