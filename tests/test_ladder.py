"""``arena-eval --ladder`` (training/ladder.py): a round-robin of Team Capture teams, policy seats
batched on the native env, LLM seats through the chat path against the strict scripted
OpenAI-compatible server; openskill ratings, the win/draw/loss matrix, Wilson intervals."""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import one_line, run_cli
from test_pretrained import BLOCK_TORCH, untrained_run

from arena_envs.cli import arena_eval
from arena_envs.llm.server import ScriptedModelServer
from arena_envs.sharded import make_native_env
from arena_envs.training.common import agent_factory, load_config
from arena_envs.training.ladder import (
    Entrant,
    TeamAgent,
    against_scripted,
    policy_games,
    ratings,
    snapshot_agent,
    wilson,
)

ROOT = Path(__file__).resolve().parents[1]


def test_the_short_ladder_rates_policies_and_a_scripted_llm_seat(tmp_path):
    """CI's ladder: 4 games a pair among random, scripted, the shipped policy and an LLM team (the
    scripted model behind the strict OpenAI-compatible server, through the chat path)."""
    with ScriptedModelServer() as server:
        llm = f"llm=llm:scripted@{server.base_url}"
        teams = ["random", "scripted", "pretrained", llm]
        document = arena_eval_ladder([*teams, "--games", "4", "--concurrency", "4", "--out", str(tmp_path)])
        assert server.requests_seen, "no request reached the model"
    names = ["random", "scripted", "pretrained", "llm"]
    order = [row["entrant"] for row in document["ratings"]]
    assert order.index("scripted") < order.index("random"), document["ratings"]
    ordinal = {row["entrant"]: row["ordinal"] for row in document["ratings"]}
    assert ordinal["scripted"] > ordinal["random"] and ordinal["pretrained"] > ordinal["random"]
    matrix = document["matrix"]
    for a, b in combinations(names, 2):  # every pair played its 4 games, seen alike from both sides
        assert sum(matrix[a][b]) == 4 and matrix[a][b] == matrix[b][a][::-1], (a, b, matrix[a][b], matrix[b][a])
    assert sum(sum(cell) for row in matrix.values() for cell in row.values()) == 2 * 4 * 6
    assert sorted(map(sorted, document["llm_pairs"])) == sorted(sorted(["llm", n]) for n in names[:3])
    assert document["llm"]["requests"] >= 4 * 3 * 2 and document["llm"]["failed_requests"] == 0
    # each game played to the world's end, long after the LLM's 4 replies (at most 4 x (8 calls + 20 ticks))
    assert document["llm"]["mean_ticks"] > 200
    assert matrix["scripted"]["random"] == [4, 0, 0]  # on either side (100 of 100 measured)
    as_blue = {row["team"]: row for row in document["against_scripted"]}
    assert set(as_blue) == {"random", "pretrained", "llm"} and all(row["games"] == 2 for row in as_blue.values())
    written = json.loads((tmp_path / "ladder.json").read_text())
    assert written["matrix"] == matrix and (tmp_path / "ladder.png").stat().st_size > 10_000
    top = document["ratings"][0]  # the table shows the ratings in their order
    assert f"| 1 | `{top['entrant']}` | {top['ordinal']:.2f} |" in (tmp_path / "ladder.md").read_text()


def arena_eval_ladder(argv: list[str]) -> dict:
    from arena_envs.training.evaluate import evaluate

    return evaluate(["--ladder", *argv])


def test_policy_teams_play_without_torch(tmp_path):
    """The guide's arena-eval --ladder of policy teams, small: random and a mixed team of the shipped policy
    and scripted, with torch blocked (none imported)."""
    code = BLOCK_TORCH + (f"from arena_envs.cli import arena_eval\n"
                          f"status = arena_eval(['--ladder', 'random', 'pretrained+scripted', "
                          f"'--games', '2', '--out', {str(tmp_path)!r}])\n"
                          f"assert 'torch' not in sys.modules and 'stable_baselines3' not in sys.modules\n"
                          f"sys.exit(status)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads((tmp_path / "ladder.json").read_text())
    assert document["entrants"]["pretrained+scripted"] == ["pretrained", "scripted"]
    assert document["matrix"]["pretrained+scripted"]["random"] == [2, 0, 0]


@pytest.mark.parametrize("seat, module", [("run", "torch"), ("run/league/snapshot_0.pt", "torch")])
def test_a_trained_seat_without_torch_names_the_extra(tmp_path, seat, module):
    run = tmp_path / "run"
    (run / "league").mkdir(parents=True)
    (run / "config.yaml").write_text("env_id: arena_envs/TeamCapture-v0\n")
    (run / "model.zip").write_bytes(b"")
    (run / "league" / "snapshot_0.pt").write_bytes(b"")
    code = BLOCK_TORCH + (f"from arena_envs.cli import arena_eval\n"
                          f"sys.exit(arena_eval(['--ladder', 'random', {str(tmp_path / seat)!r}, '--games', '2', "
                          f"'--out', {str(tmp_path / 'out')!r}]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 2, done.stderr[-2000:]
    assert one_line(done.stderr).startswith(f"arena-eval: error: {module} is not installed (the 'train' extra)")


def test_an_llm_seat_without_the_llm_extra_is_one_line_before_any_game(tmp_path):
    code = ("import sys; sys.modules['openai'] = None\n"
            "from arena_envs.cli import arena_eval\n"
            f"sys.exit(arena_eval(['--ladder', 'scripted', 'llm:m@http://127.0.0.1:9/v1', '--games', '200', "
            f"'--out', {str(tmp_path)!r}]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2
    assert one_line(done.stderr) == ("arena-eval: error: openai is not installed (the 'llm' extra): "
                                     "pip install -e '.[llm]' in the arena-envs checkout")
    assert not (tmp_path / "ladder.json").exists()


@pytest.mark.parametrize("argv, error", [
    (["scripted", "llm:smollm2"], "an LLM seat is llm:<model>@<base-url>"),
    (["scripted", "llm:m@localhost:8000"], "an LLM seat is llm:<model>@<base-url>"),
    (["scripted", "random+scripted+pretrained"], "names 3 seats; a team has 2"),
    (["scripted", "nosuch"], "seat 'nosuch' is none of random, scripted"),
    (["scripted", "pretrained:foraging"], "plays Foraging-v0, not TeamCapture-v0"),
    (["scripted", "scripted"], "at least two teams of different names"),
    (["scripted", "x=random", "x=pretrained"], "at least two teams of different names"),
    (["scripted", "random", "--games", "0"], "must be at least 1"),
    (["scripted", "random", "--env-arg", "agents_per_tem=3"], "did you mean 'agents_per_team'"),
])
def test_a_wrong_team_is_one_line(capsys, tmp_path, argv, error):
    status, _, err = run_cli(arena_eval, ["--ladder", *argv, "--out", str(tmp_path)], capsys)
    assert status == 2 and error in one_line(err), err
    assert not (tmp_path / "ladder.json").exists()


def test_a_model_the_server_does_not_serve_is_one_line(capsys, tmp_path):
    with ScriptedModelServer() as server:
        status, _, err = run_cli(arena_eval, ["--ladder", "scripted", f"llm:gpt-9@{server.base_url}", "--games", "2",
                                              "--out", str(tmp_path)], capsys)
    assert status == 2 and "does not serve 'gpt-9'" in one_line(err)


def test_a_league_snapshot_plays_as_its_runs_final_model(tmp_path):
    """A snapshot (.pt, the lean Agent's state_dict) and model.zip of the same weights act alike."""
    run, agent = untrained_run(tmp_path / "run", "team_capture", net_arch=(32, 32))
    (run / "league").mkdir()
    torch.save(agent.state_dict(), run / "league" / "snapshot_0.pt")
    envs = make_native_env("team_capture", 8, agents_per_team=2)
    obs, _ = envs.reset(seed=3)
    blue = {k: v[:, :2] for k, v in obs.items()}
    final = agent_factory(str(run / "model.zip"), "team_capture", 0, deterministic=True)(envs).act(blue)
    snapshot = snapshot_agent(run / "league" / "snapshot_0.pt", envs, deterministic=True)
    league = load_config("team_capture", "ppo/team_capture")["league"]
    assert snapshot.held.every == league["action_repeat"] > 1  # the league's: held as it was trained
    mine = snapshot.act(blue)
    for key in ("tool", "move_to"):
        np.testing.assert_array_equal(np.asarray(mine[key]), np.asarray(final[key]))
    other = torch.nn.Linear(2, 2).state_dict()
    torch.save(other, run / "league" / "snapshot_1.pt")
    with pytest.raises(Exception, match="is not a league snapshot"):
        snapshot_agent(run / "league" / "snapshot_1.pt", envs)
    envs.close()


def test_games_are_reproducible_and_swap_sides():
    """The same seeds give the same outcomes (sampled policies included); a pair's second half is
    the first half's worlds with the sides swapped: scripted against itself draws or wins each side alike."""
    a, b = Entrant.parse("pretrained+scripted", 2), Entrant.parse("random", 2)
    first = policy_games(a, b, 4, 10_000, {"agents_per_team": 2})
    assert first.tolist() == policy_games(a, b, 4, 10_000, {"agents_per_team": 2}).tolist()
    assert set(first.tolist()) <= {-1, 0, 1} and len(first) == 4
    mirror = policy_games(Entrant.parse("scripted", 2), Entrant.parse("x=scripted", 2), 4, 10_000,
                          {"agents_per_team": 2})
    assert (mirror[:2] == -mirror[2:]).all()  # the same world, sides swapped: the other side's result


def test_a_mixed_team_takes_each_seat_from_its_agent():
    """random+scripted: seat 1 acts as the random agent would, seat 2 as the scripted team's second agent."""
    envs = make_native_env("team_capture", 16, agents_per_team=2)
    obs, _ = envs.reset(seed=5)
    blue = {k: v[:, :2] for k, v in obs.items()}
    mixed = TeamAgent(Entrant.parse("random+scripted", 2), envs, seed=7).act(blue)
    alone = {name: agent_factory(name, "team_capture", 7)(envs).act(blue) for name in ("random", "scripted")}
    for key in ("tool", "move_to"):
        np.testing.assert_array_equal(np.asarray(mixed[key])[:, 0], np.asarray(alone["random"][key])[:, 0])
        np.testing.assert_array_equal(np.asarray(mixed[key])[:, 1], np.asarray(alone["scripted"][key])[:, 1])
    assert not np.array_equal(np.asarray(alone["random"]["move_to"]), np.asarray(alone["scripted"]["move_to"]))
    envs.close()


def test_ratings_follow_the_results():
    results = {(0, 1): np.array([1, 1, 1, 0]), (0, 2): np.array([1, 1, 1, 1]), (1, 2): np.array([1, 0, 1, 1])}
    table = ratings(["a", "b", "c"], results)
    assert [row["entrant"] for row in table] == ["a", "b", "c"]
    assert all(abs(row["ordinal"] - (row["mu"] - 3 * row["sigma"])) < 1e-9 for row in table)
    flipped = ratings(["a", "b", "c"], {pair: -o for pair, o in results.items()})
    assert [row["entrant"] for row in flipped] == ["c", "b", "a"]


def test_win_rates_against_scripted_count_the_blue_games_only():
    # outcomes from the first entrant's side; it is blue in the first half of the games
    as_first = against_scripted(["a", "scripted"], {(0, 1): np.array([1, 1, -1, -1])})
    as_second = against_scripted(["scripted", "a"], {(0, 1): np.array([-1, 0, -1, 1])})
    assert (as_first[0]["wins"], as_first[0]["games"]) == (2, 2)
    assert (as_second[0]["wins"], as_second[0]["draws"], as_second[0]["games"]) == (1, 0, 2)  # a blue: +1, -1
    assert against_scripted(["a", "b"], {(0, 1): np.array([1])}) == []


def test_wilson_intervals():
    low, high = wilson(5, 10)
    assert abs(low - 0.2366) < 1e-3 and abs(high - 0.7634) < 1e-3
    assert wilson(0, 2)[0] == 0.0 and abs(wilson(0, 2)[1] - 0.6576) < 1e-3
    assert wilson(20, 20)[1] == 1.0 and wilson(0, 0) == (0.0, 1.0)


def test_a_draw_rates_both_teams_alike():
    """A draw is a tie, not a win of the pair's first entrant: teams that only drew each other keep
    equal ratings, in either order, and a draw against a weaker team costs the stronger one."""
    for results in ({(0, 1): np.array([0])}, {(0, 1): np.array([0, 0, 0, 0])}):
        table = {row["entrant"]: row for row in ratings(["a", "b"], results)}
        assert table["a"]["mu"] == pytest.approx(table["b"]["mu"], abs=1e-12)
        assert table["a"]["sigma"] == pytest.approx(table["b"]["sigma"], abs=1e-12)
        assert table["a"]["sigma"] < 25 / 3  # the games were rated
    # a beat c twice; then a draw with c: a keeps less than after a win, c gains on a loss
    history = np.array([1, 1])
    drawn = {row["entrant"]: row["mu"] for row in ratings(["a", "c"], {(0, 1): np.append(history, 0)})}
    won = {row["entrant"]: row["mu"] for row in ratings(["a", "c"], {(0, 1): np.append(history, 1)})}
    lost = {row["entrant"]: row["mu"] for row in ratings(["a", "c"], {(0, 1): np.append(history, -1)})}
    assert lost["a"] < drawn["a"] < won["a"] and won["c"] < drawn["c"] < lost["c"]
