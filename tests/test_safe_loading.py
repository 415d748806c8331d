"""A played model runs none of its author's code, and a malformed policy file is one line.

The attacks of issue 43 (item 2): a run directory whose SB3 zip carries pickled objects that run
code when unpickled (here they write a marker file) is played through every door that loads a
model (``arena-eval``, the ladder, ``arena-view --play``, the league); the marker must never
appear. A model only ``PPO.load`` reads is refused in one line naming ``--trust-pickle``, and
with the flag it is read (and its code runs: the flag is the gate). ``.npz`` policies of five
malformed shapes are one line each, and a small file declaring a 1 GiB array is refused before
it is inflated, the process staying small.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from cli_helpers import one_line, run_cli
from gymnasium.vector import AutoresetMode
from test_pretrained import untrained_run

from arena_envs import pretrained
from arena_envs.cli import UsageError, arena_eval, arena_view
from arena_envs.sharded import make_native_env
from arena_envs.training.common import ModelAgent, load_config
from arena_envs.training.ladder import snapshot_agent
from arena_envs.training.league import make_league
from arena_envs.wrappers.flatten import FlatEncoding, merge_agents

ROOT = Path(__file__).resolve().parents[1]
FLAG = "--trust-pickle"


class WritesMarker:
    """Unpickled, it writes ``marker``: what a hostile author's code would do instead of ``id``."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('the author ran code')",)


def replace_entry(model: Path, name: str, data: bytes) -> None:
    """Rewrite the zip ``model`` with its entry ``name`` replaced by ``data``."""
    with zipfile.ZipFile(model) as archive:
        entries = {info.filename: archive.read(info) for info in archive.infolist()}
    entries[name] = data
    with zipfile.ZipFile(model, "w", zipfile.ZIP_DEFLATED) as archive:
        for key, value in entries.items():
            archive.writestr(key, value)


def hostile_data(model: Path, marker: Path) -> None:
    """The zip's ``data``, its observation space's ``:serialized:`` object replaced by one writing ``marker``."""
    with zipfile.ZipFile(model) as archive:
        data = json.loads(archive.read("data"))
    data["observation_space"][":serialized:"] = base64.b64encode(pickle.dumps(WritesMarker(marker))).decode()
    replace_entry(model, "data", json.dumps(data).encode())


def hostile_weights(model: Path, marker: Path) -> None:
    """The zip's ``policy.pth``, a torch file whose pickle writes ``marker``."""
    buffer = io.BytesIO()
    torch.save(WritesMarker(marker), buffer)
    replace_entry(model, "policy.pth", buffer.getvalue())


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "the-author-ran-code"


def hostile_run(folder: Path, scenario: str, marker: Path, weights: bool = False) -> tuple[Path, object]:
    """A run directory of ``scenario`` whose zip runs code when unpickled: in its ``data`` (weights
    intact, so that a loader of weights alone plays it) and, with ``weights``, in ``policy.pth`` too."""
    run, agent = untrained_run(folder, scenario, net_arch=(32, 32))
    hostile_data(run / "model.zip", marker)
    if weights:
        hostile_weights(run / "model.zip", marker)
    return run, agent


def test_the_crafted_zip_runs_its_code_under_sb3s_loader(tmp_path, marker):
    """The attack file is real: SB3's PPO.load (what every door called before) runs it."""
    from stable_baselines3 import PPO

    run, _ = hostile_run(tmp_path / "run", "foraging", marker)
    with pytest.raises(Exception):  # noqa: B017  (what SB3 makes of the None the code returned)
        PPO.load(run / "model.zip", device="cpu")
    assert marker.read_text() == "the author ran code"


# -- the doors: arena-eval, the ladder, arena-view --play, the league --------------------------------


def test_arena_eval_plays_a_hostile_run_from_its_weights_without_running_its_code(tmp_path, marker, capsys):
    run, agent = hostile_run(tmp_path / "run", "foraging", marker)
    status, _, err = run_cli(arena_eval, [str(run), "Foraging-v0", "--episodes", "2",
                                                "--env-arg", "max_ticks=20", "--out", str(tmp_path / "eval")], capsys)
    assert status == 0, err
    assert "ppo" in json.loads((tmp_path / "eval" / "eval.json").read_text()) and not marker.exists()
    # and what played is the run's policy: the rebuilt actor's actions are the lean agent's
    envs = make_native_env("foraging", 4, max_ticks=20)
    played = ModelAgent.load(run, envs)
    obs, _ = envs.reset(seed=1)
    np.testing.assert_array_equal(played.model.predict(played.encoding.observe(obs))[0],
                                  agent.predict(played.encoding.observe(obs))[0])
    envs.close()
    assert not marker.exists()


def test_arena_view_play_records_a_hostile_run_without_running_its_code(tmp_path, marker, capsys):
    run, _ = hostile_run(tmp_path / "run", "foraging", marker)
    status, _, err = run_cli(arena_view, ["--play", str(run), "Foraging-v0", "--episodes", "1",
                                          "--export", str(tmp_path / "site")], capsys)
    assert status == 0, err
    assert (tmp_path / "site" / "index.html").exists() and not marker.exists()


def test_the_ladder_plays_a_hostile_run_without_running_its_code(tmp_path, marker, capsys):
    run, _ = hostile_run(tmp_path / "run", "team_capture", marker)
    status, _, err = run_cli(arena_eval, ["--ladder", "random", str(run), "--games", "2",
                                          "--env-arg", "max_ticks=20", "--out", str(tmp_path / "ladder")], capsys)
    assert status == 0, err
    document = json.loads((tmp_path / "ladder" / "ladder.json").read_text())
    assert sum(document["matrix"]["random"][str(run)]) == 2 and not marker.exists()


def test_the_league_takes_a_hostile_run_as_an_opponent_without_running_its_code(tmp_path, marker):
    run, _ = hostile_run(tmp_path / "run", "team_capture", marker)
    league = make_league(*team_capture_league(run / "model.zip"))
    assert [member.name for member in league.members] == [str(run / "model.zip")] and not marker.exists()
    league.native.close()


def team_capture_league(opponent: Path) -> tuple[object, dict]:
    config = load_config("team_capture", "ppo/team_capture")
    config.update(seed=0, num_workers=1)
    config["league"]["opponents"] = [str(opponent)]
    native = make_native_env("team_capture", 2, AutoresetMode.SAME_STEP, **config.get("env_kwargs", {}))
    return native, config


def test_a_league_snapshot_is_built_from_its_weights_not_from_its_configs_layer_sizes(tmp_path):
    """A snapshot's run config naming layers of 2**40 units would allocate terabytes: the network is
    sized from the (size-checked) weights instead."""
    run, agent = untrained_run(tmp_path / "run", "team_capture", net_arch=(32, 16))
    (run / "league").mkdir()
    torch.save(agent.state_dict(), run / "league" / "snapshot_0.pt")
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["policy_kwargs"]["net_arch"] = [2**40, 2**40]
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    envs = make_native_env("team_capture", 2, agents_per_team=2)
    snapshot = snapshot_agent(run / "league" / "snapshot_0.pt", envs)
    envs.close()
    assert [layer.out_features for layer in snapshot.model.policy_net[::2]] == [32, 16]


DOORS = {
    "arena-eval": lambda run, out: (arena_eval, [str(run), "TeamCapture-v0", "--episodes", "1", "--out", str(out)]),
    "ladder": lambda run, out: (arena_eval, ["--ladder", "random", str(run), "--games", "2", "--out", str(out)]),
    "arena-view --play": lambda run, out: (arena_view, ["--play", str(run), "TeamCapture-v0", "--episodes", "1",
                                                        "--export", str(out)]),
}


@pytest.mark.parametrize("door", DOORS)
def test_a_zip_whose_weights_are_code_is_refused_in_one_line_naming_the_flag(tmp_path, marker, capsys, door):
    run, _ = hostile_run(tmp_path / "run", "team_capture", marker, weights=True)
    command, argv = DOORS[door](run, tmp_path / "out")
    status, _, err = run_cli(command, argv, capsys)
    line = one_line(err)
    assert status == 2 and line.startswith("arena-eval: error: ") and FLAG in line, line
    assert "policy.pth is not a plain torch state dict" in line
    assert not marker.exists() and not (tmp_path / "out" / "ladder.json").exists()


def test_the_league_refuses_a_zip_whose_weights_are_code(tmp_path, marker):
    run, _ = hostile_run(tmp_path / "run", "team_capture", marker, weights=True)
    native, config = team_capture_league(run / "model.zip")
    with pytest.raises(UsageError, match=f"not a plain torch state dict.*{FLAG}"):
        make_league(native, config)
    native.close()
    assert not marker.exists()


def test_a_model_only_sb3_reads_loads_only_with_the_flag_and_the_flag_is_the_gate(tmp_path, marker, capsys):
    """A policy the weights cannot rebuild (dict observations): refused in one line naming the flag;
    with it, SB3's PPO.load reads the file, and so runs the code in it."""
    run, _ = hostile_run(tmp_path / "run", "foraging", marker)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["encoding"]["dict_obs"] = True
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    argv = [str(run), "Foraging-v0", "--episodes", "1", "--out", str(tmp_path / "eval")]
    status, _, err = run_cli(arena_eval, argv, capsys)
    line = one_line(err)
    assert status == 2 and "over dict observations, which its weights alone do not rebuild" in line
    assert FLAG in line and not marker.exists()
    status, _, err = run_cli(arena_eval, [*argv, FLAG], capsys)
    assert marker.exists()  # the user said they trust it: PPO.load ran what the file holds
    assert status == 2 and "is not a model Stable-Baselines3 loads" in one_line(err)  # (it returned None, no space)


def test_the_rebuilt_actor_acts_as_sb3s_loaded_model_sample_for_sample(tmp_path):
    """Weights alone give PPO.load's actions: the most likely ones, and samples drawn from the same
    generator state (so an evaluation's results do not change with the loader)."""
    from stable_baselines3 import PPO

    from arena_envs.training.weights import Sb3Actor, actor_weights

    run, _ = untrained_run(tmp_path / "run", "team_capture", net_arch=(32, 16), activation="relu")
    sb3 = PPO.load(run / "model.zip", device="cpu")
    actor = Sb3Actor(actor_weights(run / "model.zip", "relu"), sb3.action_space.nvec.tolist())
    envs = make_native_env("team_capture", 8, agents_per_team=2)
    encoding = FlatEncoding.for_env(envs, **load_config("team_capture", "ppo/team_capture")["encoding"])
    obs, _ = envs.reset(seed=3)
    flat = encoding.observe(merge_agents(obs, obs["agent"].shape[1]))  # a row per agent
    envs.close()
    np.testing.assert_array_equal(actor.predict(flat, deterministic=True)[0], sb3.predict(flat, deterministic=True)[0])
    for seed in (0, 1):
        torch.manual_seed(seed)
        ours = actor.predict(flat, deterministic=False)[0]
        torch.manual_seed(seed)
        np.testing.assert_array_equal(ours, sb3.predict(flat, deterministic=False)[0])


def test_a_zip_declaring_huge_weights_is_refused_before_it_is_inflated(tmp_path, capsys):
    run, _ = untrained_run(tmp_path / "run", "foraging")
    model = run / "model.zip"
    with zipfile.ZipFile(model) as archive:
        entries = {info.filename: archive.read(info) for info in archive.infolist() if info.filename != "policy.pth"}
    with zipfile.ZipFile(model, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
        with archive.open("policy.pth", "w", force_zip64=True) as entry:  # 80 MiB of zeros, deflated
            for _ in range(80):
                entry.write(bytes(2**20))
    assert model.stat().st_size < 2**20
    status, _, err = run_cli(arena_eval, [str(run), "Foraging-v0", "--episodes", "1", "--out", str(tmp_path)], capsys)
    line = one_line(err)
    assert status == 2 and "policy.pth declares 83,886,080 bytes of weights, more than 67,108,864" in line


# -- exported .npz policies ---------------------------------------------------------------------------


def write_policy(path: Path, arrays: dict[str, np.ndarray], metadata) -> Path:
    with path.open("wb") as fh:
        np.savez_compressed(fh, metadata=np.array(json.dumps(metadata)), **arrays)
    return path


def shipped_policy() -> tuple[dict[str, np.ndarray], dict]:
    with np.load(pretrained.path_of("foraging")) as data:
        arrays = {key: data[key] for key in data.files}
    return arrays, json.loads(str(arrays.pop("metadata")))


def metadata_a_list(arrays, metadata):
    return arrays, [metadata]


def no_nvec(arrays, metadata):
    return arrays, {k: v for k, v in metadata.items() if k != "nvec"}


def unknown_activation(arrays, metadata):
    return arrays, {**metadata, "activation": "gelu"}


def mismatched_layers(arrays, metadata):
    return {**arrays, "policy.1.weight": arrays["policy.1.weight"][:-3]}, metadata


def unknown_encoding_key(arrays, metadata):
    return arrays, {**metadata, "encoding": {**metadata["encoding"], "directionz": 8}}


@pytest.mark.parametrize("malformed, error", [
    (metadata_a_list, "its metadata is a JSON list, not an object"),
    (no_nvec, "its metadata's nvec is None, not a list of action sizes"),
    (unknown_activation, "its activation 'gelu' is none of ['tanh', 'relu']"),
    (mismatched_layers, "policy.1 is weights [61, 64] of float32 and biases [64] of float32, after a layer of 64"),
    (unknown_encoding_key, "its encoding names ['directionz'], none of the encoding's keys"),
])
def test_a_malformed_policy_file_is_one_line(tmp_path, capsys, malformed, error):
    path = write_policy(tmp_path / "bad.npz", *malformed(*shipped_policy()))
    status, _, err = run_cli(arena_eval, [str(path), "Foraging-v0", "--episodes", "1", "--out", str(tmp_path)], capsys)
    line = one_line(err)
    assert status == 2 and line.startswith(f"arena-eval: error: {path} is not a pretrained policy"), line
    assert error in line, line


GIB = 2**30


def test_a_small_file_declaring_a_huge_array_is_refused_before_it_is_inflated(tmp_path):
    """A 1 GiB array of zeros deflates to about 1 MB: its header is read and refused before its data,
    and the process that reads the file never grows by the gigabyte."""
    arrays, metadata = shipped_policy()
    path = write_policy(tmp_path / "bomb.npz", arrays, metadata)
    rows = GIB // (4 * 16384)
    header = {"descr": "<f4", "fortran_order": False, "shape": (rows, 16384)}
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as archive, \
            archive.open("policy.9.weight.npy", "w", force_zip64=True) as entry:
        np.lib.format.write_array_header_1_0(entry, header)
        chunk = bytes(16 * 2**20)
        for _ in range(GIB // len(chunk)):
            entry.write(chunk)
    assert path.stat().st_size < 2 * 2**20
    # the child reports its own peak: VmHWM, its memory's high-water mark since exec (a child's ru_maxrss
    # keeps the forking process's size, gigabytes when pytest has run the rest of the suite)
    code = ("import re, sys; from arena_envs.cli import arena_eval; "
            f"status = arena_eval([{str(path)!r}, 'Foraging-v0']); "
            "print(re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read())[1]); sys.exit(status)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    peak_kib = int(done.stdout.split()[-1])
    assert peak_kib * 1024 < GIB // 2, f"the process grew to {peak_kib // 1024} MB"
    line = one_line(done.stderr)
    assert done.returncode == 2
    assert f"{path} is not a pretrained policy" in line and "its arrays declare more than 67,108,864 bytes" in line
