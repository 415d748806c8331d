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
- the run directory is the one ``arena-train --algo sb3-ppo`` writes (``config.yaml``,
  ``progress.csv``, ``tb/``, ``checkpoints/``, ``model.zip``, ``speed.json``), and
  ``model.zip`` *is* a Stable-Baselines3 PPO model holding the same weights, so
  ``arena-eval``, ``PPO.load`` and the learning-curve plot read it unchanged.

The config is the scenario's YAML under ``training/configs/ppo/`` (see there for every key).
"""

from __future__ import annotations

import csv
import functools
import json
import re
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from torch import nn

from arena_envs.sharded import ShardedVectorEnv, make_native_env
from arena_envs.training import league as leagues
from arena_envs.training.common import (
    ModelAgent,
    PPOConfig,
    action_repeat,
    agent_factory,
    is_team,
    play,
    score_text,
    set_torch_threads,
)
from arena_envs.wrappers.flatten import FlatEncoding, FlatVectorEnv

# -- 1. hyperparameters ----------------------------------------------------------------------


ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


# -- 2. the envs -------------------------------------------------------------------------------


def make_envs(config: dict[str, Any], num_envs: int) -> VectorEnv:
    """The flat-encoded batch of ``num_envs`` worlds (``SAME_STEP`` autoreset: a finished world's
    next observation is its new episode's first), in ``num_workers`` processes."""
    workers = int(config.get("num_workers", 1))
    make_native = functools.partial(flat_native_env, config)
    if workers <= 1:
        return make_native(num_envs)
    # the workers encode their own worlds too: the encoding is about half of a step's cost
    return ShardedVectorEnv(num_envs, workers, make_native=make_native, copy=False)


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


# -- 6. training -----------------------------------------------------------------------------------


def train(config: dict[str, Any], out: Path, resume: bool = False, max_minutes: float | None = None,
          progress: bool = True, on_checkpoint: Callable[[Agent, int], Any] | None = None) -> dict[str, Any]:
    """Train the lean PPO with ``config`` (a resolved ``arena-train`` config) into ``out``;
    returns what it writes to ``speed.json``. ``on_checkpoint(agent, steps)`` runs after each
    checkpoint and at the end (``--capture-video`` records a rollout there)."""
    args = PPOConfig.from_config(config)
    seed = int(config["seed"])
    set_torch_threads(config)
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

    # rollout buffers, allocated once: (T, N, ...)
    obs_buf = torch.zeros((T, N, obs_size))
    act_buf = torch.zeros((T, N, len(nvec)), dtype=torch.long)
    logp_buf, rew_buf, done_buf, val_buf = (torch.zeros((T, N)) for _ in range(4))

    # episode statistics of the last 100 episodes (per world; in team capture, blue's return)
    ep_return, ep_length = np.zeros(B), np.zeros(B, np.int64)
    returns, lengths, scores, successes = (deque(maxlen=100) for _ in range(4))

    log = RunLog(out, f"-from-{start_step}" if start_step else "")
    total = int(config["timesteps"])
    per_update = T * B * agents  # timesteps count agent steps in team capture, as with SB3
    checkpoint_every = int(config.get("checkpoint_every", 500_000))
    eval_every = int(config.get("eval_every") or 0)
    next_checkpoint, next_eval = step + checkpoint_every, step + (eval_every or 0)
    deadline = time.monotonic() + 60 * max_minutes if max_minutes else float("inf")
    updates = max((total - step) // per_update, 1 if step < total else 0)

    obs_np, _ = envs.reset(seed=seed)
    obs = torch.from_numpy(obs_np).view(N, obs_size)  # no copy: the env's array seen by torch
    start, env_seconds, eval_seconds, cpu_start = time.perf_counter(), 0.0, 0.0, time.process_time()
    for update in range(1, updates + 1):
        if args.anneal_lr:  # linearly to 0 over the whole run (also across resumed segments)
            for group in optimizer.param_groups:
                group["lr"] = args.learning_rate * max(1.0 - step / total, 0.0)

        # 6a. rollout: T steps of every world
        for t in range(T):
            obs_buf[t] = obs
            with torch.no_grad():
                action, logprob, value = agent.act(obs)
            act_buf[t], logp_buf[t], val_buf[t] = action, logprob, value
            tick = time.perf_counter()
            flat_actions = action.numpy() if agents == 1 else action.numpy().reshape(B, agents, -1)
            obs_np, reward, terminated, truncated, info = envs.step(flat_actions)
            env_seconds += time.perf_counter() - tick
            obs = torch.from_numpy(obs_np).view(N, obs_size)
            # a world's episode ends when every agent's does; truncation counts as an end (the
            # observation shows the time left, so the value can tell that the end is near)
            done = np.logical_or(terminated, truncated).reshape(N)
            reward = np.asarray(reward, np.float64).reshape(N)
            rew_buf[t] = torch.from_numpy(scaler(reward, done) if scaler else reward)
            done_buf[t] = torch.from_numpy(done)
            ep_return += reward.reshape(B, agents)[:, 0]
            ep_length += 1
            ended = done.reshape(B, agents)[:, 0]
            if ended.any():
                final = info.get("final_info", info)
                worlds = np.flatnonzero(ended)
                returns.extend(ep_return[worlds])
                lengths.extend(ep_length[worlds])
                scores.extend(np.asarray(final["score"], np.float64)[worlds])  # blue's in team capture
                successes.extend(np.asarray(final["success"], np.float64)[worlds])
                ep_return[worlds], ep_length[worlds] = 0.0, 0
        step += per_update

        # 6b. advantages: GAE over the (T, N) rollout, every row at once
        with torch.no_grad():
            advantages = gae(rew_buf, val_buf, done_buf, agent.value(obs), args.gamma, args.gae_lambda)
        targets = advantages + val_buf

        # 6c. the update: n_epochs passes over the rollout in shuffled minibatches
        b_obs, b_act = obs_buf.view(T * N, obs_size), act_buf.view(T * N, -1)
        b_logp, b_adv, b_ret, b_val = logp_buf.view(-1), advantages.view(-1), targets.view(-1), val_buf.view(-1)
        size = T * N
        minibatch = min(args.batch_size, size)
        clip_fractions, approx_kl = [], torch.tensor(0.0)
        for _ in range(args.n_epochs):
            order = torch.randperm(size)
            for first in range(0, size - minibatch + 1, minibatch):
                idx = order[first:first + minibatch]
                logprob, entropy, value = agent.evaluate(b_obs[idx], b_act[idx])
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

        # 6d. evaluate, log, checkpoint
        evaluation = {}
        if eval_every and step >= next_eval:
            next_eval = step + eval_every
            tick = time.perf_counter()
            evaluation = periodic_eval(agent, config)
            eval_seconds += time.perf_counter() - tick
        elapsed = time.perf_counter() - start - eval_seconds
        variance = b_ret.var()
        row = {"time/total_timesteps": step, "time/time_elapsed": elapsed, "time/eval_seconds": eval_seconds,
               "time/iterations": update,
               "time/fps": (step - start_step) / elapsed, "time/env_share": env_seconds / elapsed,
               "train/learning_rate": optimizer.param_groups[0]["lr"],
               "train/policy_gradient_loss": pg_loss.item(), "train/value_loss": v_loss.item(),
               "train/entropy_loss": entropy_loss.item(), "train/approx_kl": approx_kl.item(),
               "train/clip_fraction": float(np.mean(clip_fractions)) if clip_fractions else 0.0,
               "train/explained_variance": (1 - (b_ret - b_val).var() / variance).item() if variance > 0 else 0.0}
        if returns:
            row.update({"rollout/ep_rew_mean": float(np.mean(returns)), "rollout/ep_len_mean": float(np.mean(lengths))})
        if scores:  # none before the first episode ends: an empty cell rather than a score of 0
            row["rollout/score_mean"] = float(np.mean(scores))
            row["rollout/score_episodes"] = len(scores)
        if successes:
            row["rollout/success_rate"] = float(np.mean(successes))
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
            save_checkpoint(agent, optimizer, scaler, step, config, checkpoints)
            if on_checkpoint:
                on_checkpoint(agent, step)
        if time.monotonic() > deadline:
            break
    if progress:
        print()
    seconds = max(time.perf_counter() - start - eval_seconds, 1e-9)
    cpu_seconds = time.process_time() - cpu_start  # this process's: the figure a busy machine moves least

    # 7. the final model, also as the last checkpoint (for --resume)
    save_checkpoint(agent, optimizer, scaler, step, config, checkpoints)
    save_sb3(agent, config, out / "model.zip")
    if on_checkpoint:
        on_checkpoint(agent, step)
    envs.close()
    log.close()
    speed = {"algo": "ppo", "n_envs": B, "num_workers": int(config.get("num_workers", 1)), "timesteps": step,
             "seconds": seconds, "steps_per_s": (step - start_step) / seconds, "env_share": env_seconds / seconds,
             "eval_seconds": eval_seconds, "cpu_seconds": cpu_seconds,
             "torch_threads": torch.get_num_threads(),
             "score_mean": float(np.mean(scores)) if scores else None, "score_episodes": len(scores)}
    (out / "speed.json").write_text(json.dumps(speed, indent=2))
    return speed


def save_checkpoint(agent: Agent, optimizer: torch.optim.Optimizer, scaler: ReturnScaler | None, step: int,
                    config: dict[str, Any], folder: Path) -> None:
    """``ppo_<steps>_steps.pt`` (what ``--resume`` needs) and ``ppo_<steps>_steps.zip`` (what
    ``arena-eval`` reads) in ``folder``."""
    torch.save({"agent": agent.state_dict(), "optimizer": optimizer.state_dict(),
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
        return ModelAgent(agent, encoding, deterministic=not sampled, action_repeat=action_repeat(config))

    # the evaluation's samples come from a generator of their own: training draws the same numbers
    # whether or how often it evaluates
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        result = play(make_agent, env_id, int(config.get("eval_episodes", 32)), seed, config.get("env_kwargs", {}),
                      agent_factory(opponent, env_id, seed) if is_team(env_id) else None)
    return {"eval/return_mean": float(result["return"].mean()), "eval/score_mean": float(result["score"].mean()),
            "eval/success_rate": float(result["success"].mean())}
