"""Lean PPO: one file, read top to bottom, that trains at the speed of the native batch.

    arena-train Foraging-v0 --out runs/foraging              # --algo ppo is the default
    arena-train team_capture_v0 --out runs/team_capture      # self-play: one policy plays every agent

CleanRL's PPO (clipped surrogate, GAE, advantage normalisation, value loss, entropy bonus,
gradient clipping, a linearly annealed learning rate) over an arena vector env:

- the batch is the native numpy one (``gym.make_vec``, or ``team_capture_v0.vector_env``
  whose agents are rows of the same batch), seen through the flat encoding
  (:class:`~arena_envs.wrappers.FlatVectorEnv`); with ``num_workers > 1`` it is split over
  worker processes (:class:`~arena_envs.sharded.ShardedVectorEnv`) that step in parallel;
- observations go to torch without a copy (``torch.from_numpy``) and into rollout buffers
  allocated once; GAE runs on whole (T, N) tensors; updates use large minibatches on
  ``torch_threads`` threads (0: every core; keep 1 on a machine others are using);
- with ``async_learner: true`` the update runs in a second process on the other of two rollout
  buffers while this one collects the next rollout (:class:`AsyncLearner`: one update behind,
  deterministic); both paths run the same :func:`ppo_update`;
- the run directory is the one ``arena-train --algo sb3-ppo`` writes (``config.yaml``,
  ``progress.csv``, ``tb/``, ``checkpoints/``, ``model.zip``, ``speed.json``), and
  ``model.zip`` *is* a Stable-Baselines3 PPO model holding the same weights, so
  ``arena-eval``, ``PPO.load`` and the learning-curve plot read it unchanged.

The config is the scenario's YAML under ``training/configs/ppo/`` (see there for every key).
"""

from __future__ import annotations

import copy
import csv
import functools
import json
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from torch import nn

from arena_envs.sharded import ShardedVectorEnv, WorkerError, make_native_env
from arena_envs.training import league as leagues
from arena_envs.training.common import (
    ModelAgent,
    PPOConfig,
    agent_factory,
    holding,
    is_team,
    play,
    score_text,
    set_torch_threads,
)
from arena_envs.wrappers.flatten import FlatEncoding, FlatVectorEnv

# -- 1. hyperparameters ----------------------------------------------------------------------


ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


# -- 2. the envs -------------------------------------------------------------------------------

WORKER_TIMEOUT = 60.0  # seconds a worker may take to answer (the config's worker_timeout): then it is hung


def make_envs(config: dict[str, Any], num_envs: int) -> VectorEnv:
    """The flat-encoded batch of ``num_envs`` worlds (``SAME_STEP`` autoreset: a finished world's
    next observation is its new episode's first), in ``num_workers`` processes."""
    workers = int(config.get("num_workers", 1))
    make_native = functools.partial(flat_native_env, config)
    if workers <= 1:
        return make_native(num_envs)
    # the workers encode their own worlds too: the encoding is about half of a step's cost; a worker
    # silent for worker_timeout seconds (a step takes milliseconds) is hung: the run stops, saved
    return ShardedVectorEnv(num_envs, workers, make_native=make_native, copy=False,
                            reply_timeout=float(config.get("worker_timeout", WORKER_TIMEOUT)))


def flat_native_env(config: dict[str, Any], num_envs: int) -> VectorEnv:
    """The native batch of ``num_envs`` worlds under the config's flat encoding."""
    native = make_native_env(config["env_id"], num_envs, AutoresetMode.SAME_STEP, **config.get("env_kwargs", {}))
    if config.get("league"):  # the learner plays blue, the league's pool red (training/league.py)
        native = leagues.make_league(native, config)
    return FlatVectorEnv(native, **config.get("encoding", {}))


# -- 3. the agent: separate actor and critic MLPs over the flat observation ---------------------


def mlp(sizes: list[int], activation: type[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [nn.Linear(a, b), activation()]
    return nn.Sequential(*layers)


def init(layer: nn.Linear, gain: float) -> nn.Linear:
    """Orthogonal weights, zero bias (as CleanRL and SB3 do)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class Agent(nn.Module):
    """Actor and critic: one MLP each (``net_arch`` hidden sizes); the actor's head gives the
    logits of every component of the ``MultiDiscrete`` action side by side."""

    def __init__(self, obs_size: int, nvec: list[int], net_arch: list[int], activation: str = "tanh"):
        super().__init__()
        act = ACTIVATIONS[activation]
        self.nvec = [int(n) for n in nvec]
        self.policy_net = mlp([obs_size, *net_arch], act)
        self.value_net = mlp([obs_size, *net_arch], act)
        for body in (self.policy_net, self.value_net):
            for layer in body[::2]:
                init(layer, np.sqrt(2))
        self.action_head = init(nn.Linear(net_arch[-1], sum(self.nvec)), 0.01)
        self.value_head = init(nn.Linear(net_arch[-1], 1), 1.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value_head(self.value_net(obs)).squeeze(-1)

    def log_probs(self, obs: torch.Tensor) -> list[torch.Tensor]:
        """Per component, the log-probabilities of its choices (N, n)."""
        logits = self.action_head(self.policy_net(obs))
        return [torch.log_softmax(part, -1) for part in logits.split(self.nvec, -1)]

    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sampled actions (N, components), their log-probability and the state values."""
        logps = self.log_probs(obs)
        # Gumbel-max: argmax(logp + Gumbel noise) is a sample of each categorical, all in one go
        actions = torch.stack([(lp - torch.empty_like(lp).exponential_().log()).argmax(-1) for lp in logps], -1)
        logprob = sum(lp.gather(-1, actions[:, i:i + 1]).squeeze(-1) for i, lp in enumerate(logps))
        return actions, logprob, self.value(obs)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor):
        """Log-probability and entropy of ``actions``, and the state values: what the update needs."""
        logps = self.log_probs(obs)
        logprob = sum(lp.gather(-1, actions[:, i:i + 1]).squeeze(-1) for i, lp in enumerate(logps))
        entropy = sum(-(lp.exp() * lp).sum(-1) for lp in logps)
        return logprob, entropy, self.value(obs)

    @torch.no_grad()
    def predict(self, obs: np.ndarray, deterministic: bool = True, **_) -> tuple[np.ndarray, None]:
        """SB3's ``predict``: the most likely (or a sampled) action of each row of ``obs``."""
        obs_t = torch.as_tensor(obs, dtype=torch.float32)
        if not deterministic:
            return self.act(obs_t)[0].numpy(), None
        return torch.stack([lp.argmax(-1) for lp in self.log_probs(obs_t)], -1).numpy(), None


# -- 4. advantages and rewards ------------------------------------------------------------------


def gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, next_value: torch.Tensor,
        gamma: float, lam: float) -> torch.Tensor:
    """Generalised advantage estimates of a (T, N) rollout: one backward pass over time, each step
    on all N rows at once. ``dones[t]`` marks that step ``t`` ended its episode (no bootstrap
    across it); ``next_value`` is the value of the observation after the last step."""
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(len(rewards))):
        value_after = next_value if t == len(rewards) - 1 else values[t + 1]
        live = 1.0 - dones[t]
        delta = rewards[t] + gamma * value_after * live - values[t]
        last = delta + gamma * lam * live * last
        advantages[t] = last
    return advantages


class ReturnScaler:
    """Rewards divided by the running standard deviation of the discounted return, clipped (as
    SB3's ``VecNormalize(norm_obs=False)``): one scale for every scenario's rewards."""

    def __init__(self, rows: int, gamma: float, clip: float = 10.0):
        self.returns = np.zeros(rows)
        self.gamma, self.clip = gamma, clip
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def __call__(self, reward: np.ndarray, done: np.ndarray) -> np.ndarray:
        self.returns = self.returns * self.gamma + reward
        batch_mean, batch_var, n = self.returns.mean(), self.returns.var(), len(self.returns)
        delta, total = batch_mean - self.mean, self.count + n  # Chan et al.'s parallel update
        self.mean += delta * n / total
        self.var = (self.var * self.count + batch_var * n + delta ** 2 * self.count * n / total) / total
        self.count = total
        self.returns[done] = 0.0
        return np.clip(reward / np.sqrt(self.var + 1e-8), -self.clip, self.clip)

    def state_dict(self) -> dict[str, Any]:
        return {"returns": self.returns, "mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.returns, self.mean, self.var, self.count = (state["returns"], state["mean"], state["var"],
                                                         state["count"])


# -- 5. what the run writes ----------------------------------------------------------------------

# progress.csv's columns: the names SB3 logs (arena-eval plots rollout/score_mean or eval/return_mean).
# time/time_elapsed is the wall time of training alone: the periodic evaluation's is time/eval_seconds, so
# that the first row whose eval/score_mean reaches a target gives the time to reach it, however often the
# run evaluates.
COLUMNS = ("time/total_timesteps", "time/time_elapsed", "time/eval_seconds", "time/fps", "time/env_share",
           "time/iterations",
           "rollout/ep_rew_mean", "rollout/ep_len_mean", "rollout/score_mean", "rollout/success_rate",
           "rollout/score_episodes",
           "train/learning_rate", "train/policy_gradient_loss", "train/value_loss", "train/entropy_loss",
           "train/approx_kl", "train/clip_fraction", "train/explained_variance",
           "eval/return_mean", "eval/score_mean", "eval/success_rate")


class RunLog:
    """One row per update to ``progress[-from-<steps>].csv`` and TensorBoard."""

    def __init__(self, out: Path, suffix: str = ""):
        from torch.utils.tensorboard import SummaryWriter

        self.file = (out / f"progress{suffix}.csv").open("w", newline="")
        self.csv = csv.DictWriter(self.file, COLUMNS)
        self.csv.writeheader()
        self.tb = SummaryWriter(str(out / "tb" / f"PPO{suffix or '_1'}"))

    def write(self, row: dict[str, float]) -> None:
        self.csv.writerow({k: row.get(k, "") for k in COLUMNS})
        self.file.flush()
        for key, value in row.items():
            self.tb.add_scalar(key, value, int(row["time/total_timesteps"]))

    def close(self) -> None:
        self.file.close()
        self.tb.close()


def save_sb3(agent: Agent, config: dict[str, Any], path: Path) -> None:
    """Write ``agent`` as a Stable-Baselines3 PPO model (``PPO.load`` reads it): an SB3 policy of
    the same architecture, given the same weights."""
    from stable_baselines3 import PPO

    from arena_envs.wrappers.sb3 import Sb3VecEnv

    arch = config["policy_kwargs"]["net_arch"]
    venv = Sb3VecEnv.make(config["env_id"], 1, flat=config.get("encoding", {}), **config.get("env_kwargs", {}))
    policy_kwargs = {"net_arch": {"pi": list(arch), "vf": list(arch)},
                     "activation_fn": ACTIVATIONS[config["policy_kwargs"].get("activation", "tanh")]}
    model = PPO("MlpPolicy", venv, policy_kwargs=policy_kwargs, device="cpu", n_steps=8, batch_size=8)
    sb3 = model.policy
    weights = {"mlp_extractor.policy_net": agent.policy_net, "mlp_extractor.value_net": agent.value_net,
               "action_net": agent.action_head, "value_net": agent.value_head}
    state = {f"{prefix}.{key}": value for prefix, module in weights.items()
             for key, value in module.state_dict().items()}
    sb3.load_state_dict(state, strict=True)
    model.save(path)
    venv.close()


def latest_checkpoint(folder: Path) -> tuple[Path, int] | None:
    """The lean checkpoint (``ppo_<steps>_steps.pt``) with the most steps in ``folder``."""
    found = [(int(m.group(1)), p) for p in folder.glob("ppo_*_steps.pt")
             if (m := re.fullmatch(r"ppo_(\d+)_steps\.pt", p.name))]
    if not found:
        return None
    steps, path = max(found)
    return path, steps


# -- 6. rollouts and updates -----------------------------------------------------------------------


@dataclass
class Rollout:
    """One rollout's buffers, (T, N, ...), allocated once: what the update reads."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    values: torch.Tensor
    next_value: torch.Tensor  # (N,): the value of the observation after the last step

    @classmethod
    def allocate(cls, T: int, N: int, obs_size: int, components: int) -> Rollout:
        return cls(torch.zeros((T, N, obs_size)), torch.zeros((T, N, components), dtype=torch.long),
                   *(torch.zeros((T, N)) for _ in range(4)), torch.zeros(N))

    def share_memory_(self) -> Rollout:
        for buffer in vars(self).values():
            buffer.share_memory_()
        return self


class Collector:
    """Steps the batch with an agent's sampled actions into a :class:`Rollout`, keeping the episode
    statistics (per world; in team capture, blue's) and the time spent in the env."""

    def __init__(self, envs: VectorEnv, agents: int, obs_size: int, scaler: ReturnScaler | None, seed: int):
        self.envs, self.agents, self.scaler = envs, agents, scaler
        self.B = envs.num_envs
        self.N, self.obs_size = self.B * agents, obs_size
        obs_np, _ = envs.reset(seed=seed)
        self.obs = torch.from_numpy(obs_np).view(self.N, obs_size)  # no copy: the env's array seen by torch
        self.ep_return, self.ep_length = np.zeros(self.B), np.zeros(self.B, np.int64)
        self.returns, self.lengths, self.scores, self.successes = (deque(maxlen=100) for _ in range(4))
        self.env_seconds = 0.0

    @torch.no_grad()
    def collect(self, agent: Agent, rollout: Rollout) -> None:
        B, N, agents = self.B, self.N, self.agents
        for t in range(len(rollout.obs)):
            rollout.obs[t] = self.obs
            action, logprob, value = agent.act(self.obs)
            rollout.actions[t], rollout.logprobs[t], rollout.values[t] = action, logprob, value
            tick = time.perf_counter()
            flat_actions = action.numpy() if agents == 1 else action.numpy().reshape(B, agents, -1)
            obs_np, reward, terminated, truncated, info = self.envs.step(flat_actions)
            self.env_seconds += time.perf_counter() - tick
            self.obs = torch.from_numpy(obs_np).view(N, self.obs_size)
            # a world's episode ends when every agent's does; truncation counts as an end (the
            # observation shows the time left, so the value can tell that the end is near)
            done = np.logical_or(terminated, truncated).reshape(N)
            reward = np.asarray(reward, np.float64).reshape(N)
            rollout.rewards[t] = torch.from_numpy(self.scaler(reward, done) if self.scaler else reward)
            rollout.dones[t] = torch.from_numpy(done)
            self.ep_return += reward.reshape(B, agents)[:, 0]
            self.ep_length += 1
            ended = done.reshape(B, agents)[:, 0]
            if ended.any():
                final = info.get("final_info", info)
                worlds = np.flatnonzero(ended)
                self.returns.extend(self.ep_return[worlds])
                self.lengths.extend(self.ep_length[worlds])
                self.scores.extend(np.asarray(final["score"], np.float64)[worlds])  # blue's in team capture
                self.successes.extend(np.asarray(final["success"], np.float64)[worlds])
                self.ep_return[worlds], self.ep_length[worlds] = 0.0, 0
        rollout.next_value.copy_(agent.value(self.obs))


def ppo_update(agent: Agent, optimizer: torch.optim.Optimizer, rollout: Rollout, args: PPOConfig,
               learning_rate: float) -> dict[str, float]:
    """One PPO update from ``rollout``: GAE over the (T, N) rollout, every row at once, then
    ``n_epochs`` passes in shuffled minibatches. Returns the update's ``train/*`` columns."""
    for group in optimizer.param_groups:
        group["lr"] = learning_rate
    with torch.no_grad():
        advantages = gae(rollout.rewards, rollout.values, rollout.dones, rollout.next_value, args.gamma,
                         args.gae_lambda)
    targets = advantages + rollout.values
    T, N, obs_size = rollout.obs.shape
    b_obs, b_act = rollout.obs.view(T * N, obs_size), rollout.actions.view(T * N, -1)
    b_logp, b_adv, b_ret = rollout.logprobs.view(-1), advantages.view(-1), targets.view(-1)
    b_val = rollout.values.view(-1)
    size = T * N
    minibatch = min(args.batch_size, size)
    clip_fractions, approx_kl = [], torch.tensor(0.0)
    for _ in range(args.n_epochs):
        order = torch.randperm(size)
        for first in range(0, size - minibatch + 1, minibatch):
            idx = order[first:first + minibatch]
            # index_select, not b_obs[idx]: the same rows, 6x faster (0.29 against 1.86 ms per 8,192 rows)
            logprob, entropy, value = agent.evaluate(b_obs.index_select(0, idx), b_act.index_select(0, idx))
            log_ratio = logprob - b_logp[idx]
            ratio = log_ratio.exp()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - log_ratio).mean()
                clip_fractions.append(((ratio - 1.0).abs() > args.clip_range).float().mean().item())
            adv = b_adv[idx]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - args.clip_range, 1 + args.clip_range)).mean()
            v_loss = 0.5 * ((value - b_ret[idx]) ** 2).mean()
            entropy_loss = -entropy.mean()
            loss = pg_loss + args.vf_coef * v_loss + args.ent_coef * entropy_loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
        if args.target_kl is not None and approx_kl > args.target_kl:
            break
    variance = b_ret.var()
    return {"train/learning_rate": learning_rate,
            "train/policy_gradient_loss": pg_loss.item(), "train/value_loss": v_loss.item(),
            "train/entropy_loss": entropy_loss.item(), "train/approx_kl": approx_kl.item(),
            "train/clip_fraction": float(np.mean(clip_fractions)) if clip_fractions else 0.0,
            "train/explained_variance": (1 - (b_ret - b_val).var() / variance).item() if variance > 0 else 0.0}


class Learner:
    """The update in this process: ``start`` runs it, ``wait`` returns its columns."""

    def __init__(self, agent: Agent, optimizer: torch.optim.Optimizer, args: PPOConfig, rollouts: list[Rollout]):
        self.agent, self.optimizer, self.args, self.rollouts = agent, optimizer, args, rollouts
        self.stats: dict[str, float] = {}

    def start(self, slot: int, learning_rate: float) -> None:
        self.stats = ppo_update(self.agent, self.optimizer, self.rollouts[slot], self.args, learning_rate)

    def wait(self) -> dict[str, float]:
        return self.stats

    def optimizer_state(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def cpu_seconds(self) -> float:
        return 0.0  # counted in this process's

    def close(self) -> None:
        pass


class AsyncLearner:
    """The update in a second process (``async_learner: true``), while this one collects the next
    rollout with the weights it has: the policy lags one update behind, as in APPO. Two rollout
    buffers and a copy of the weights live in shared memory; this process always waits for exactly
    update k's weights before collecting rollout k + 2, so results never depend on timing."""

    def __init__(self, agent: Agent, optimizer: torch.optim.Optimizer, args: PPOConfig, rollouts: list[Rollout],
                 seed: int, threads: int):
        import torch.multiprocessing as mp

        self.agent = agent
        self.shared = copy.deepcopy(agent).share_memory()  # the learner's newest weights
        context = mp.get_context()  # the platform's, as ShardedVectorEnv's workers (fork on Linux: no re-import)
        self.connection, theirs = context.Pipe()
        forked = context.get_start_method() == "fork"
        self.process = context.Process(
            target=learn, daemon=True, name="ppo-learner",
            args=(theirs, self.connection if forked else None, self.shared, [r.share_memory_() for r in rollouts],
                  args, optimizer.state_dict(), seed, threads))
        self.process.start()
        theirs.close()  # the learner's end stays only in the learner: it reads EOF if this process dies
        self.learner_cpu = 0.0

    def start(self, slot: int, learning_rate: float) -> None:
        self.connection.send(("update", slot, learning_rate))

    def wait(self) -> dict[str, float]:
        stats = self._receive()
        self.agent.load_state_dict(self.shared.state_dict())
        return stats

    def optimizer_state(self) -> dict[str, Any]:
        self.connection.send(("optimizer",))
        return self._receive()

    def cpu_seconds(self) -> float:
        return self.learner_cpu

    def _receive(self) -> Any:
        try:
            while not self.connection.poll(0.5):
                if not self.process.is_alive():
                    raise EOFError
            kind, value, self.learner_cpu = self.connection.recv()
        except (EOFError, OSError):  # its end of the pipe closed, or reset: it is gone
            self.process.join(5)
            raise RuntimeError(f"the PPO learner process died (exit code {self.process.exitcode})") from None
        if kind == "error":
            raise RuntimeError(f"the PPO learner process failed:\n{value}")
        return value

    def close(self) -> None:
        if self.process.is_alive():
            try:
                self.connection.send(("stop",))
            except OSError:  # it is already on its way out
                pass
            self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.connection.close()


def learn(connection, ours, shared: Agent, rollouts: list[Rollout], args: PPOConfig, optimizer_state: dict[str, Any],
          seed: int, threads: int) -> None:
    """The :class:`AsyncLearner`'s process (``ours``: the trainer's end of the pipe when forked):
    each ``("update", slot, lr)`` runs :func:`ppo_update` on its own copy of the weights and writes
    them to ``shared``; it replies ``(kind, value, its CPU seconds)``, an error as the traceback's text."""
    import traceback

    if ours is not None:  # a forked copy of the trainer's end: closed, so that its death reads as EOF
        ours.close()
    torch.set_num_threads(threads)
    torch.manual_seed(seed)  # the minibatches' shuffles
    agent = copy.deepcopy(shared)
    optimizer = torch.optim.Adam(agent.parameters(), eps=1e-5)
    optimizer.load_state_dict(optimizer_state)
    try:
        while True:
            message = connection.recv()
            if message[0] == "stop":
                return
            if message[0] == "optimizer":
                connection.send(("optimizer", optimizer.state_dict(), time.process_time()))
                continue
            _, slot, learning_rate = message
            stats = ppo_update(agent, optimizer, rollouts[slot], args, learning_rate)
            shared.load_state_dict(agent.state_dict())
            connection.send(("stats", stats, time.process_time()))
    except (KeyboardInterrupt, EOFError, BrokenPipeError):  # Ctrl-C, or the trainer is gone
        return
    except Exception:
        connection.send(("error", traceback.format_exc(), time.process_time()))


# -- 7. training -----------------------------------------------------------------------------------


def train(config: dict[str, Any], out: Path, resume: bool = False, max_minutes: float | None = None,
          progress: bool = True, on_checkpoint: Callable[[Agent, int], Any] | None = None) -> dict[str, Any]:
    """Train the lean PPO with ``config`` (a resolved ``arena-train`` config) into ``out``;
    returns what it writes to ``speed.json``. ``on_checkpoint(agent, steps)`` runs after each
    checkpoint and at the end (``--capture-video`` records a rollout there)."""
    args = PPOConfig.from_config(config)
    seed = int(config["seed"])
    threads = set_torch_threads(config)
    checkpoints = out / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)

    # the batch: B worlds (times A agents in team capture), N = B * A rows of every array
    envs = make_envs(config, int(config["n_envs"]))
    agents = len(getattr(envs.unwrapped, "agents", None) or ()) or 1  # per world
    encoding: FlatEncoding = FlatEncoding.for_env(envs, **config.get("encoding", {}))
    B, T = envs.num_envs, args.n_steps
    N, obs_size = B * agents, int(np.prod(encoding.observation_space.shape))
    nvec = encoding.action_space.nvec.tolist()

    torch.manual_seed(seed)
    policy_kwargs = config.get("policy_kwargs") or {}
    agent = Agent(obs_size, nvec, list(policy_kwargs.get("net_arch", [64, 64])),
                  policy_kwargs.get("activation", "tanh"))
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    scaler = ReturnScaler(N, args.gamma) if config.get("normalize_reward", True) else None
    step, start_step = 0, 0
    found = latest_checkpoint(checkpoints) if resume else None
    if found:
        saved = torch.load(found[0], weights_only=False)
        agent.load_state_dict(saved["agent"])
        optimizer.load_state_dict(saved["optimizer"])
        if scaler and saved.get("scaler"):
            scaler.load_state_dict(saved["scaler"])
        step = start_step = saved["step"]
        # a resumed segment draws worlds and actions of its own, not the start's again
        seed = int(np.random.SeedSequence([seed, step]).generate_state(1)[0] % 2**31)
        torch.manual_seed(seed)
        print(f"resuming from {found[0]} ({step:,} steps), seed {seed}")
    league = leagues.attach(envs, agent, out / "league", resume=bool(found))  # None without a league: section

    # the update runs here, or in a learner process on the other rollout buffer (async_learner)
    asynchronous = bool(config.get("async_learner", False))
    rollouts = [Rollout.allocate(T, N, obs_size, len(nvec)) for _ in range(2 if asynchronous else 1)]
    learner = (AsyncLearner(agent, optimizer, args, rollouts, seed, threads) if asynchronous
               else Learner(agent, optimizer, args, rollouts))

    log = RunLog(out, f"-from-{start_step}" if start_step else "")
    total = int(config["timesteps"])
    per_update = T * B * agents  # timesteps count agent steps in team capture, as with SB3
    checkpoint_every = int(config.get("checkpoint_every", 500_000))
    eval_every = int(config.get("eval_every") or 0)
    next_checkpoint, next_eval = step + checkpoint_every, step + (eval_every or 0)
    deadline = time.monotonic() + 60 * max_minutes if max_minutes else float("inf")
    updates = max((total - step) // per_update, 1 if step < total else 0)

    collector = Collector(envs, agents, obs_size, scaler, seed)
    start, eval_seconds, cpu_start = time.perf_counter(), 0.0, time.process_time()
    failure, updating = None, False  # a worker that died or hung; whether an update is under way
    try:
        collector.collect(agent, rollouts[0])  # the first rollout
        for update in range(1, updates + 1):
            # 7a. the update on the last rollout; the learning rate falls linearly to 0 over the whole run
            #     (also across resumed segments)
            learner.start((update - 1) % len(rollouts), args.learning_rate * (max(1.0 - step / total, 0.0)
                                                                              if args.anneal_lr else 1.0))
            updating = True
            # 7b. the next rollout: after the update here; with the async learner, during it, with the
            #     weights of the update before
            if update < updates and time.monotonic() < deadline:
                collector.collect(agent, rollouts[update % len(rollouts)])
            stats = learner.wait()  # and the agent has the update's weights
            updating = False
            step += per_update

            # 7c. evaluate, log, checkpoint
            evaluation = {}
            if eval_every and step >= next_eval:
                next_eval = step + eval_every
                tick = time.perf_counter()
                evaluation = periodic_eval(agent, config)
                eval_seconds += time.perf_counter() - tick
            elapsed = time.perf_counter() - start - eval_seconds
            row = {"time/total_timesteps": step, "time/time_elapsed": elapsed, "time/eval_seconds": eval_seconds,
                   "time/iterations": update, "time/fps": (step - start_step) / elapsed,
                   "time/env_share": collector.env_seconds / elapsed, **stats}
            scores = collector.scores
            if collector.returns:
                row.update({"rollout/ep_rew_mean": float(np.mean(collector.returns)),
                            "rollout/ep_len_mean": float(np.mean(collector.lengths))})
            if scores:  # none before the first episode ends: an empty cell rather than a score of 0
                row["rollout/score_mean"] = float(np.mean(scores))
                row["rollout/score_episodes"] = len(scores)
            if collector.successes:
                row["rollout/success_rate"] = float(np.mean(collector.successes))
            row.update(evaluation)
            if league:
                row.update(leagues.after_update(league, agent, step))
            log.write(row)
            if progress:
                shown = (f"eval {row['eval/return_mean']:.1f}" if "eval/return_mean" in row and not scores
                         else score_text(row.get("rollout/score_mean"), len(scores)))
                print(f"\r{step:>11,} steps  {row['time/fps']:>9,.0f} steps/s  {shown}   ", end="", flush=True)
            if step >= next_checkpoint:
                next_checkpoint = step + checkpoint_every
                save_checkpoint(agent, learner.optimizer_state(), scaler, step, config, checkpoints)
                if on_checkpoint:
                    on_checkpoint(agent, step)
            if time.monotonic() > deadline:
                break
        if progress:
            print()
        seconds = max(time.perf_counter() - start - eval_seconds, 1e-9)
        # CPU seconds: the figure a busy machine moves least (this process's and the learner's)
        cpu_seconds = time.process_time() - cpu_start + learner.cpu_seconds()

        # 8. the final model, also as the last checkpoint (for --resume)
        save_checkpoint(agent, learner.optimizer_state(), scaler, step, config, checkpoints)
    except WorkerError as error:  # a worker died or hung (the env has stopped them all): keep what was learnt
        failure = error
        if updating:  # the learner is well: its update of the last rollout counts
            learner.wait()
            step += per_update
        save_checkpoint(agent, learner.optimizer_state(), scaler, step, config, checkpoints)
    finally:  # each of these is bounded: a stuck learner or worker is killed
        learner.close()
        envs.close()
        log.close()
    save_sb3(agent, config, out / "model.zip")
    if failure:
        raise WorkerError(f"{failure}; the run stopped at {step:,} steps, whose checkpoint and model.zip are "
                          f"written in {out} (--resume continues it)") from failure
    if on_checkpoint:
        on_checkpoint(agent, step)
    scores = collector.scores
    speed = {"algo": "ppo", "n_envs": B, "num_workers": int(config.get("num_workers", 1)),
             "async_learner": asynchronous, "timesteps": step,
             "seconds": seconds, "steps_per_s": (step - start_step) / seconds,
             "env_share": collector.env_seconds / seconds, "eval_seconds": eval_seconds, "cpu_seconds": cpu_seconds,
             "learner_cpu_seconds": learner.cpu_seconds(), "torch_threads": torch.get_num_threads(),
             "score_mean": float(np.mean(scores)) if scores else None, "score_episodes": len(scores)}
    (out / "speed.json").write_text(json.dumps(speed, indent=2))
    return speed


def save_checkpoint(agent: Agent, optimizer_state: dict[str, Any], scaler: ReturnScaler | None, step: int,
                    config: dict[str, Any], folder: Path) -> None:
    """``ppo_<steps>_steps.pt`` (what ``--resume`` needs) and ``ppo_<steps>_steps.zip`` (what
    ``arena-eval`` reads) in ``folder``."""
    torch.save({"agent": agent.state_dict(), "optimizer": optimizer_state,
                "scaler": scaler.state_dict() if scaler else None, "step": step}, folder / f"ppo_{step}_steps.pt")
    save_sb3(agent, config, folder / f"ppo_{step}_steps.zip")


def periodic_eval(agent: Agent, config: dict[str, Any], opponent: str = "scripted", seed: int = 10_000
                  ) -> dict[str, float]:
    """The policy on ``eval_episodes`` held-out worlds (as blue against ``opponent`` in team capture),
    its most likely actions or, with ``eval_stochastic``, sampled ones (what ``arena-eval --stochastic``
    plays): eval/return_mean, eval/score_mean, eval/success_rate."""
    env_id = config["env_id"]
    sampled = bool(config.get("eval_stochastic", False))

    def make_agent(envs):
        encoding = FlatEncoding.for_env(envs, **config.get("encoding", {}))
        return ModelAgent(agent, encoding, deterministic=not sampled, **holding(config))

    # the evaluation's samples come from a generator of their own: training draws the same numbers
    # whether or how often it evaluates
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        result = play(make_agent, env_id, int(config.get("eval_episodes", 32)), seed, config.get("env_kwargs", {}),
                      agent_factory(opponent, env_id, seed) if is_team(env_id) else None)
    return {"eval/return_mean": float(result["return"].mean()), "eval/score_mean": float(result["score"].mean()),
            "eval/success_rate": float(result["success"].mean())}
