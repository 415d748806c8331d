"""What ``arena-train`` and ``arena-eval`` share: configs, training envs, agents and episodes.

A config is one YAML file per scenario under ``training/configs/`` (``foraging.yaml``
for ``arena_envs/Foraging-v0``, ``team_capture.yaml`` for ``team_capture_v0``): the env's
arguments, the flat encoding, the PPO hyperparameters and the run's defaults. A run
directory holds the resolved ``config.yaml`` next to the model, so evaluation rebuilds
exactly the encoding the model was trained with.

Agents (:class:`RandomAgent`, :class:`ScriptedAgent`, :class:`ModelAgent`, a shipped
:class:`~arena_envs.pretrained.PretrainedAgent`) map a batch of raw observations to a batch of
structured actions; in team capture they play one team, arrays ``(B, agents_per_team, ...)``.
Naming and playing them (:func:`agent_factory`, :func:`play`) needs no torch: only a
trained model (:class:`ModelAgent`) and the trainers load it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import gymnasium as gym
import numpy as np
import yaml
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

import arena_envs  # noqa: F401  (registers the envs)
from arena_envs import pretrained
from arena_envs.cli import UsageError
from arena_envs.names import Scenario, resolve, unknown
from arena_envs.sharded import make_native_env as make_native
from arena_envs.wrappers.flatten import FlatEncoding, FlatEnv, merge_agents, split_agents

if TYPE_CHECKING:
    from stable_baselines3.common.vec_env import VecEnv

CONFIG_DIR = Path(__file__).parent / "configs"

Section = TypeVar("Section")  # a config section's dataclass


def full_env_id(name: str) -> str:
    """Any spelling of a scenario (``Foraging-v0``, ``foraging``, ``team_capture_v0``) -> its registered id."""
    return resolve(name).env_id


def scenario_name(env_id: str) -> str:
    """Any spelling of a scenario -> its key (``foraging``, ``team_capture``): the config's name."""
    return resolve(env_id).key


def is_team(env_id: str) -> bool:
    """Whether ``env_id`` is a two-team scenario (agents play in teams, one policy for all)."""
    return resolve(env_id).multi_agent


def trainable(name: str) -> Scenario:
    """The scenario ``name`` spells when it has arrays to train and evaluate on; a text scenario
    (Treasure Hunt) gets a one-line error that names what plays it."""
    scenario = resolve(name)
    if scenario.text:
        raise UsageError(f"{scenario.short_id} is a text puzzle for LLM agents, with no PPO config: play it with "
                         f"arena-agent {scenario.short_id} --agent scripted (or a model: --base-url URL --model NAME)")
    return scenario


def config_names() -> dict[str, Path]:
    """Every shipped config by name: ``foraging`` (SB3's), ``ppo/foraging`` (the lean PPO's),
    ``foraging_large_batch`` ..."""
    return {str(p.relative_to(CONFIG_DIR).with_suffix("")): p for p in sorted(CONFIG_DIR.rglob("*.yaml"))}


def config_path(spec: str | Path) -> Path:
    """A config from a path to a YAML file or a name of :func:`config_names`."""
    path = Path(spec)
    if path.is_file():
        return path
    names = config_names()
    if str(spec) in names:
        return names[str(spec)]
    raise UsageError(unknown(str(spec), "config (neither a file nor a shipped config)", list(names)))


def load_config(env: str, path: str | Path | None = None) -> dict[str, Any]:
    """The scenario's training config (or the YAML at ``path``), with ``env_id`` filled in."""
    env_id = full_env_id(env)
    path = config_path(path) if path else CONFIG_DIR / f"{scenario_name(env_id)}.yaml"
    if not path.exists():
        raise UsageError(f"{resolve(env).short_id} has no training config ({path.name}): "
                         f"configs exist for {', '.join(config_names())}")
    config = yaml.safe_load(path.read_text())
    config["env_id"] = env_id
    return config


# -- overrides from the command line (--set KEY=VALUE) -------------------------------------------


# the trainer's section, here (ppo.py imports it) so that checking --set keys loads no torch
@dataclass
class PPOConfig:
    """The ``ppo:`` section of a config (names as in SB3's PPO where it has them)."""

    n_steps: int = 32  # rollout length per world before each update
    batch_size: int = 8192  # minibatch size (rows of the rollout)
    n_epochs: int = 4
    learning_rate: float = 1e-3
    anneal_lr: bool = True  # down to 0 linearly over the run
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = None  # stop an update's epochs early past this KL

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> PPOConfig:
        return config_section(config, "ppo", cls)


def config_section(config: dict[str, Any], name: str, section_class: type[Section]) -> Section:
    """The config's ``name`` section as a ``section_class`` dataclass; an unknown key is refused,
    naming the known ones."""
    section = dict(config.get(name) or {})
    known = section_class.__dataclass_fields__  # type: ignore[attr-defined]
    unknown = set(section) - set(known)
    if unknown:
        raise ValueError(f"unknown keys in the {name} section: {sorted(unknown)} (known: {sorted(known)})")
    return section_class(**section)


# the keys a config may have besides its sections, and what the trainers read from each section
RUN_KEYS = ("algo", "env_id", "n_envs", "num_workers", "async_learner", "timesteps", "seed", "torch_threads",
            "normalize_reward", "checkpoint_every", "eval_every", "eval_episodes", "eval_stochastic", "policy",
            "capture_video", "worker_timeout")


def known_keys(config: dict[str, Any], algo: str) -> list[str]:
    """Every dotted key ``--set`` accepts for this config and trainer (``env_kwargs.*`` is checked by
    making the env, so any name is let through here)."""
    import inspect

    from stable_baselines3 import PPO

    ppo_keys = (list(PPOConfig.__dataclass_fields__) if algo == "ppo"
                else [p for p in inspect.signature(PPO.__init__).parameters if p not in ("self", "policy", "env")])
    encoding = [p for p in inspect.signature(FlatEncoding.__init__).parameters
                if p not in ("self", "observation_space", "action_space", "params")]
    keys = [*RUN_KEYS, *(f"ppo.{k}" for k in ppo_keys), *(f"encoding.{k}" for k in encoding),
            "policy_kwargs.net_arch", "policy_kwargs.activation"]
    keys += [f"{section}.{k}" for section, values in config.items() if isinstance(values, dict) for k in values]
    return list(dict.fromkeys(keys))


def apply_overrides(config: dict[str, Any], pairs: list[str], algo: str) -> dict[str, Any]:
    """``config`` with each ``KEY=VALUE`` of ``pairs`` set (``ppo.learning_rate=1e-3``: a dotted key,
    the value read as YAML, so ``1e-3`` is a float, ``[64, 64]`` a list and ``classic`` a string)."""
    known = known_keys(config, algo)
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--set needs KEY=VALUE (e.g. ppo.learning_rate=1e-3), got {pair!r}")
        if key not in known and not key.startswith("env_kwargs."):
            raise UsageError(unknown(key, "config key", known, shown=["ppo.*", "encoding.*", "env_kwargs.*",
                                                                      "policy_kwargs.*", *RUN_KEYS]))
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise UsageError(f"--set {key}: {text!r} is not a YAML value ({error.problem})") from None
        if isinstance(value, str) and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+", value.strip()):
            value = float(value)  # YAML 1.1 reads 1e-3 as a string (it wants 1.0e-3)
        *sections, leaf = key.split(".")
        node = config
        for section in sections:
            node = node.setdefault(section, {})
            if not isinstance(node, dict):
                raise UsageError(f"--set {key}: {section} is not a section of the config")
        node[leaf] = value
    return config


def run_directory(model_path: str | Path) -> Path:
    """The ``arena-train`` run directory of a model: the folder holding its ``config.yaml``, the
    model's own folder or, for ``checkpoints/ppo_<steps>_steps.zip``, the one above it."""
    model_path = Path(model_path)
    for folder in (model_path, model_path.parent, model_path.parent.parent):
        if (folder / "config.yaml").exists():
            return folder
    raise UsageError(f"no config.yaml beside {model_path}: arena-eval reads models that arena-train wrote")


def run_config(model_path: str | Path) -> dict[str, Any]:
    """The ``config.yaml`` saved by ``arena-train`` with a model (see :func:`run_directory`); one
    that is not a mapping of the sections a run has is a one-line :class:`UsageError`."""
    path = run_directory(model_path) / "config.yaml"
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise UsageError(f"{path} is not a run's config: {' '.join(str(error).split())[:200]}") from None
    sections = ("encoding", "env_kwargs", "policy_kwargs", "league")
    if not isinstance(config, dict) or not isinstance(config.get("env_id"), str) or \
            not all(isinstance(config.get(key) or {}, dict) for key in sections):
        raise UsageError(f"{path} is not a run's config: a mapping with env_id, and {', '.join(sections)} "
                         f"as mappings where given")
    return config


def set_torch_threads(config: dict[str, Any]) -> int:
    """Run torch on the config's ``torch_threads`` (default 1; 0: every core) and return how many.
    A small MLP gains nothing from more, and on a shared machine threads beyond the free cores
    leave OpenMP spinning: 30k SB3 steps took 55 s on every thread of a busy machine, 2.9 s on one."""
    import os

    import torch

    threads = int(config.get("torch_threads", 1)) or os.cpu_count() or 1
    torch.set_num_threads(threads)
    return threads


def score_text(score_mean: float | None, episodes: int) -> str:
    """The recent episodes' mean score for a log line, or that none has ended yet (not a score of 0)."""
    if not episodes or score_mean is None:
        return "no episode finished yet"
    return f"score {score_mean:.1f} over the last {episodes} episode{'s' * (episodes != 1)}"


# -- training envs ---------------------------------------------------------------------


def make_vec_env(config: dict[str, Any], n_envs: int, vec: str = "native") -> VecEnv:
    """SB3 envs for training: the native batch behind :class:`Sb3VecEnv` or, to compare,
    a ``DummyVecEnv`` of single envs under the same flat encoding."""
    from stable_baselines3.common.vec_env import DummyVecEnv  # here: naming and playing agents needs no SB3

    from arena_envs.wrappers.sb3 import Sb3VecEnv

    env_id, env_kwargs, encoding = config["env_id"], config.get("env_kwargs", {}), config.get("encoding", {})
    if vec == "native":
        return Sb3VecEnv.make(env_id, n_envs, flat=encoding, **env_kwargs)
    if vec == "dummy" and not is_team(env_id):
        return DummyVecEnv([lambda: FlatEnv(gym.make(env_id, **env_kwargs), **encoding) for _ in range(n_envs)])
    raise ValueError(f"vec must be 'native' or (for single-agent envs) 'dummy', got {vec!r}")


# -- agents ----------------------------------------------------------------------------


class RandomAgent:
    """Uniform samples of the structured action space, one per agent observed."""

    def __init__(self, envs: gym.vector.VectorEnv, seed: int = 0):
        self.space = envs.unwrapped.scenario.action_space  # one agent's
        self.seed = seed
        self.spaces: dict[tuple[int, ...], gym.Space] = {}

    def act(self, obs: dict[str, np.ndarray]) -> dict[str, Any]:
        shape = obs["agent"].shape[:-1]  # (B,) or, for a team, (B, N)
        if shape not in self.spaces:
            space = self.space
            for n in reversed(shape):
                space = batch_space(space, n)
            space.seed(self.seed)
            self.spaces[shape] = space
        return self.spaces[shape].sample()


class ScriptedAgent:
    """The scenario's hand-written baseline (``arena_envs.scripted``)."""

    def __init__(self, envs: gym.vector.VectorEnv, env_id: str):
        if scenario_name(env_id) not in SCRIPTED:
            raise ValueError(f"no scripted baseline for {env_id}")
        self.policy = SCRIPTED[scenario_name(env_id)](envs.unwrapped.scenario.params)

    def act(self, obs: dict[str, np.ndarray]) -> dict[str, Any]:
        return self.policy.act(obs)


class ModelAgent:
    """A trained model acting through the flat encoding it was trained with: anything with SB3's
    ``predict`` (an SB3 PPO, the lean PPO's agent, the actor :meth:`load` rebuilds).

    With ``action_repeat`` k > 1 (a league's learner, see ``training/league.py``) it decides on
    every k-th tick of an episode, or with ``decide_on_events`` on team capture's events (and
    after k ticks at most), and holds that decision in between, as it was trained to.

    Sampled actions (``deterministic=False``) come from torch's generator seeded from ``seed`` on
    each call, so an evaluation repeats with its seed, as the numpy pretrained agent's does.
    """

    def __init__(self, model, encoding: FlatEncoding, deterministic: bool = True, action_repeat: int = 1,
                 decide_on_events: bool = False, seed: int = 0):
        self.model, self.encoding, self.deterministic = model, encoding, deterministic
        self.held = pretrained.HeldDecisions(action_repeat, encoding.params.max_ticks, decide_on_events)
        self.rng = np.random.default_rng(seed)

    @classmethod
    def load(cls, path: str | Path, envs: gym.vector.VectorEnv, deterministic: bool = True,
             seed: int = 0, trust_pickle: bool = False) -> ModelAgent:
        """The model zip ``path`` (or a run directory's ``model.zip``) of an ``arena-train`` run, on
        ``envs``: its actor rebuilt from the run's ``config.yaml`` and weights, with no code of the
        file run. ``trust_pickle``: a model those cannot rebuild may be read by SB3's ``PPO.load``,
        which runs any code the file holds (see ``training/weights.py``)."""
        from arena_envs.training.weights import ActorWeights, Sb3Actor, load_policy

        path = Path(path)
        path = path / "model.zip" if path.is_dir() else path
        config = run_config(path)
        encoding = run_encoding(envs, config)
        policy = load_policy(path, config, trust_pickle)
        nvec, shape = [int(n) for n in encoding.action_space.nvec], encoding.observation_space.shape  # None: dict_obs
        if isinstance(policy, ActorWeights):
            model = Sb3Actor(policy, nvec)
            takes = f"observations of shape ({policy.obs_size},) and {policy.logits} action logits"
            fits = (policy.obs_size,) == shape and policy.logits == sum(nvec)
        else:  # SB3's own model, read because the user trusts the file
            model, its_nvec = policy, [int(n) for n in getattr(policy.action_space, "nvec", ())]
            takes = f"observations of shape {policy.observation_space.shape} and actions {its_nvec}"
            fits = policy.observation_space.shape == shape and its_nvec == nvec
        if not fits:
            raise UsageError(f"{path} does not fit this env: it takes {takes}, the env under its run's encoding "
                             f"gives {shape} and actions {nvec} ({sum(nvec)} logits); evaluate it on "
                             f"{config['env_id']} with its run's env_kwargs")
        return cls(model, encoding, deterministic, **holding(config), seed=seed)

    def act(self, obs: dict[str, np.ndarray]) -> dict[str, Any]:
        agents = obs["agent"].shape[1] if obs["agent"].ndim == 3 else None  # a team: one row per agent
        rows = merge_agents(obs, agents)
        if self.deterministic:
            flat, _ = self.model.predict(self.encoding.observe(rows), deterministic=True)
        else:
            import torch  # a model needs torch; this module does not

            with torch.random.fork_rng(devices=[]):  # the caller's global torch generator is left as it was
                torch.manual_seed(int(self.rng.integers(2**63)))
                flat, _ = self.model.predict(self.encoding.observe(rows), deterministic=False)
        return self.held(obs, split_agents(self.encoding.decode(flat, rows), agents))


def run_encoding(envs: gym.vector.VectorEnv, config: dict[str, Any]) -> FlatEncoding:
    """The flat encoding a run's ``config`` names, on ``envs``; a bad one is a one-line :class:`UsageError`."""
    try:
        return FlatEncoding.for_env(envs, **config.get("encoding", {}))
    except (TypeError, ValueError) as error:
        raise UsageError(f"the run's encoding {config.get('encoding')} does not encode {config['env_id']}: "
                         f"{error}") from None


def holding(config: dict[str, Any]) -> dict[str, Any]:
    """How a run's policy holds each decision: ``action_repeat`` ticks (``league.action_repeat``,
    default 1), ended early by team capture's events with ``decide_on_events`` (see
    ``pretrained.HeldDecisions``); :class:`ModelAgent`'s arguments and the exported metadata."""
    league = config.get("league") or {}
    return {"action_repeat": int(league.get("action_repeat", 1)),
            "decide_on_events": bool(league.get("decide_on_events", False))}


def _scripted(name: str) -> Callable[[Any], Any]:
    def make(params):
        import arena_envs.scripted

        return getattr(arena_envs.scripted, name)(params)

    return make


SCRIPTED: dict[str, Callable[[Any], Any]] = {"foraging": _scripted("ScriptedForager"),
                                             "crafting": _scripted("ScriptedCrafter"),
                                             "team_capture": _scripted("ScriptedCaptureTeam")}


def agent_factory(name: str, env_id: str, seed: int = 0, deterministic: bool | None = None,
                  trust_pickle: bool = False) -> Callable[[Any], Any]:
    """A function of the envs making the agent ``name``: ``random``, ``scripted``, a shipped policy
    (``pretrained``: this scenario's, ``pretrained:<scenario>``, or an exported ``.npz``; see
    :mod:`arena_envs.pretrained`) or a model's path. ``deterministic``: the most likely action
    or a sample; None is each agent's own default (a model's most likely action, a pretrained
    policy's sample, as it was trained and scored). ``trust_pickle``: see :meth:`ModelAgent.load`.
    A name that names nothing fails here, before any env is made."""
    if name == "random":
        return lambda envs: RandomAgent(envs, seed)
    if name == "scripted":
        return lambda envs: ScriptedAgent(envs, env_id)
    if pretrained.is_pretrained(name):
        policy = pretrained.load(name, env_id)
        return lambda envs: policy.agent(envs, bool(deterministic), seed)
    return lambda envs: ModelAgent.load(name, envs, deterministic is not False, seed, trust_pickle)


# -- episodes --------------------------------------------------------------------------


def success(info: dict[str, Any]) -> np.ndarray:
    """Whether each world's episode reached its scenario's goal: every scenario reports it in its info."""
    return np.asarray(info["success"], bool)


def policy(envs: gym.vector.VectorEnv, env_id: str, make_agent: Callable[[Any], Any],
           make_opponent: Callable[[Any], Any] | None = None) -> Callable[[dict], dict]:
    """The batch's actions from its observations: the agent's, or in team capture the agent's
    for blue and the opponent's for red."""
    agent = make_agent(envs)
    if not is_team(env_id):
        return agent.act
    from arena_envs.team_capture import join_teams, split_teams

    team, opponent = envs.unwrapped.scenario.agents_per_team, make_opponent(envs)

    def act(obs):
        blue, red = split_teams(obs, team)
        return join_teams(agent.act(blue), opponent.act(red))

    return act


def play(make_agent: Callable[[gym.vector.VectorEnv], Any], env_id: str, episodes: int, seed: int,
         env_kwargs: dict[str, Any] | None = None,
         make_opponent: Callable[[gym.vector.VectorEnv], Any] | None = None,
         record: str | Path | None = None, label: str | None = None) -> dict[str, np.ndarray]:
    """One episode in each of ``episodes`` worlds of a native batch, seeded ``seed``, ``seed + 1``, ...

    In team capture the agent plays blue and ``make_opponent``'s agent red. Returns
    per-episode arrays: return (blue's in team capture: its score minus red's), score
    (blue's), success (a win), length, and in team capture draw (the scores level at the end:
    neither a win nor a loss). With ``record`` (a directory) every episode is also
    written there for ``arena-view`` (:class:`~arena_envs.wrappers.record.RecordEpisodes`),
    named ``label``.
    """
    envs = make_native(env_id, episodes, AutoresetMode.NEXT_STEP, **(env_kwargs or {}))
    if record is not None:
        from arena_envs.wrappers.record import RecordEpisodes

        envs = RecordEpisodes(envs, record, source="arena-eval", label=label)
    act = policy(envs, env_id, make_agent, make_opponent)
    team = envs.unwrapped.scenario.agents_per_team if is_team(env_id) else None
    obs, _ = envs.reset(seed=seed)
    result = {"return": np.zeros(episodes), "score": np.zeros(episodes), "success": np.zeros(episodes),
              "length": np.zeros(episodes), **({"draw": np.zeros(episodes)} if team else {})}
    running = np.ones(episodes, bool)
    while running.any():
        obs, reward, terminated, truncated, info = envs.step(act(obs))
        result["return"] += (reward[:, 0] if team else reward) * running
        result["length"] += running
        done = running & ((terminated | truncated)[:, 0] if team else terminated | truncated)
        if done.any():  # autoreset on the next step: this step's info is the episode's last
            result["score"][done] = info["score"][done]
            result["success"][done] = info["success"][done]
            if team:
                result["draw"][done] = info["blue_score"][done] == info["red_score"][done]
            running &= ~done
    envs.close()
    return result
