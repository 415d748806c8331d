"""Trained models read without running their authors' code.

A Stable-Baselines3 model zip (``model.zip`` of an ``arena-train`` run, a
``checkpoints/ppo_<steps>_steps.zip``) holds the policy's weights as a torch state dict
(``policy.pth``) beside pickled Python objects (the ``:serialized:`` entries of ``data``,
``pytorch_variables.pth``). SB3's ``PPO.load`` unpickles those, and unpickling runs whatever
code the file's author put there: playing a run directory someone sent you would run their code.

So a played model is rebuilt from its run's ``config.yaml`` and the state dict alone, read with
``torch.load(weights_only=True)`` (tensors and plain containers, never code), as the exporter
does: the actor (``mlp_extractor.policy_net``, ``action_net``) is all that playing needs, and
:class:`Sb3Actor` acts as ``PPO.predict`` does, sample for sample. Every run ``arena-train``
writes (the lean PPO's and ``--algo sb3-ppo``'s, an MLP over the flat observation) loads so.

A model the weights cannot rebuild (another policy, dict observations) or whose weights are not
a plain state dict loads only through ``PPO.load``, and only when the user says they trust the
file: :data:`TRUST_PICKLE` on the command line, ``trust_pickle=True`` in Python.

Sizes are checked before anything is inflated: a zip entry declares its size, and a small file
can declare gigabytes (deflated zeros), so the declared sizes are refused over
:data:`MAX_WEIGHT_BYTES` before a byte is read.
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from torch import nn

from arena_envs.cli import UsageError

TRUST_PICKLE = "--trust-pickle"
MAX_WEIGHT_BYTES = 64 * 2**20  # a policy of arena-train takes well under 1 MB
MAX_ENTRIES = 10_000  # of a torch file: one per tensor, and a few more
ACTOR = "mlp_extractor.policy_net"
UNPICKLER = "WeightsUnpickler error:"  # where torch's refusal of weights_only says what the file asked for
ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}  # what the lean PPO's and SB3's configs may name


def trust_hint() -> str:
    """How a user loads a model only ``PPO.load`` reads, and what that costs."""
    return (f"Stable-Baselines3's PPO.load reads it by unpickling, which runs any code the file holds: "
            f"pass {TRUST_PICKLE} (trust_pickle=True in Python) only if you trust whoever made it")


@dataclass
class ActorWeights:
    """An MLP actor's weights as torch stores them: ``layers`` of (weight (out, in), bias (out,)),
    an ``activation`` after each, then ``head``, the logits of every action component side by side."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]
    head: tuple[torch.Tensor, torch.Tensor]
    activation: str

    @property
    def obs_size(self) -> int:
        return int((self.layers[0][0] if self.layers else self.head[0]).shape[1])

    @property
    def logits(self) -> int:
        return int(self.head[0].shape[0])


class Sb3Actor(nn.Module):
    """The actor of an SB3 ``MlpPolicy`` on a ``MultiDiscrete`` action, acting as ``PPO.predict``
    does: each component's most likely choice, or a sample drawn as SB3 draws it (one
    ``Categorical`` per component), so that a seeded generator gives the same actions."""

    def __init__(self, weights: ActorWeights, nvec: list[int]):
        super().__init__()
        self.nvec = [int(n) for n in nvec]
        modules: list[nn.Module] = []
        for weight, bias in weights.layers:
            modules += [_linear(weight, bias), ACTIVATIONS[weights.activation]()]
        self.policy_net = nn.Sequential(*modules)
        self.action_net = _linear(*weights.head)

    @torch.no_grad()
    def predict(self, obs: np.ndarray, deterministic: bool = True, **_: Any) -> tuple[np.ndarray, None]:
        logits = self.action_net(self.policy_net(torch.as_tensor(obs).float()))
        components = [torch.distributions.Categorical(logits=part) for part in logits.split(self.nvec, dim=1)]
        if deterministic:
            actions = [torch.argmax(component.probs, dim=1) for component in components]
        else:
            actions = [component.sample() for component in components]
        return torch.stack(actions, dim=1).numpy(), None


def _linear(weight: torch.Tensor, bias: torch.Tensor) -> nn.Linear:
    layer = nn.Linear(weight.shape[1], weight.shape[0])
    layer.load_state_dict({"weight": weight, "bias": bias})
    return layer


def rebuildable(config: dict[str, Any]) -> bool:
    """Whether a run's weights alone rebuild its policy: an MLP over the flat observation."""
    return config.get("policy", "MlpPolicy") == "MlpPolicy" and not (config.get("encoding") or {}).get("dict_obs")


def load_policy(path: str | Path, config: dict[str, Any], trust_pickle: bool = False) -> ActorWeights | Any:
    """The policy of the model zip ``path`` of a run of ``config``: its actor's weights, read
    without unpickling; or, with ``trust_pickle`` and only where those cannot rebuild it,
    SB3's ``PPO.load`` of the file. Anything else is a one-line :class:`UsageError`."""
    path = Path(path)
    if rebuildable(config):
        try:
            return actor_weights(path, (config.get("policy_kwargs") or {}).get("activation", "tanh"))
        except UsageError as error:
            if not trust_pickle:
                raise UsageError(f"{error}; {trust_hint()}") from None
    elif not trust_pickle:
        dict_obs = " over dict observations" if (config.get("encoding") or {}).get("dict_obs") else ""
        raise UsageError(f"{path} is a {config.get('policy', 'MlpPolicy')}{dict_obs}, which its weights alone do "
                         f"not rebuild; {trust_hint()}")
    return trusted_ppo(path)


def trusted_ppo(path: Path) -> Any:
    """SB3's ``PPO.load`` of ``path``: runs the file's pickled objects (the user said they trust it)."""
    from stable_baselines3 import PPO

    try:
        return PPO.load(path, device="cpu")
    except Exception as error:  # a broken file: whatever PPO.load raises on it, one line
        raise UsageError(f"{path} is not a model Stable-Baselines3 loads: {first_line(error)}") from None


def actor_weights(model: str | Path, activation: str = "tanh") -> ActorWeights:
    """The actor of the SB3 model zip ``model`` (its ``policy.pth``, weights only) with the
    ``activation`` its run's config names (tanh: SB3's MlpPolicy default, and the lean PPO's);
    checked to chain layer to layer."""
    if activation not in ACTIVATIONS:
        raise UsageError(f"{model}: its run's config names the activation {activation!r}, not one of "
                         f"{', '.join(ACTIVATIONS)}")
    state = sb3_state_dict(model)
    try:
        indices = sorted(int(key.split(".")[2]) for key in state if key.startswith(ACTOR + ".")
                         and key.endswith(".weight"))
        if indices != list(range(0, 2 * len(indices), 2)):  # Linear, activation, Linear ...: 0, 2, 4
            raise ValueError(f"its {ACTOR} layers are numbered {indices}, not 0, 2, 4 ...")
        layers = [(_tensor(state, f"{ACTOR}.{i}.weight", 2), _tensor(state, f"{ACTOR}.{i}.bias", 1))
                  for i in indices]
        head = (_tensor(state, "action_net.weight", 2), _tensor(state, "action_net.bias", 1))
        size = None
        for name, (weight, bias) in zip([*(f"{ACTOR}.{i}" for i in indices), "action_net"], [*layers, head],
                                        strict=True):
            if (size is not None and weight.shape[1] != size) or bias.shape[0] != weight.shape[0]:
                raise ValueError(f"{name} takes {weight.shape[1]} inputs with {bias.shape[0]} biases for "
                                 f"{weight.shape[0]} outputs, after a layer of {size}")
            size = weight.shape[0]
    except ValueError as error:
        raise UsageError(f"{model} is not an MLP policy of arena-train: {error}") from None
    return ActorWeights(layers, head, activation)


def _tensor(state: dict[str, Any], key: str, ndim: int) -> torch.Tensor:
    value = state.get(key)
    if not isinstance(value, torch.Tensor) or value.ndim != ndim or not value.is_floating_point():
        raise ValueError(f"{key} is missing or not a {ndim}-d float tensor")
    if not torch.isfinite(value).all():  # SB3's Categorical would refuse the logits mid-game
        raise ValueError(f"{key} holds weights that are not finite")
    return value.detach().float()


def sb3_state_dict(model: str | Path) -> dict[str, Any]:
    """The state dict in an SB3 model zip (``policy.pth``), its size checked before it is
    inflated and read with ``torch.load(weights_only=True)``; nothing else of the zip is read."""
    try:
        with zipfile.ZipFile(model) as archive:
            entry = archive.getinfo("policy.pth")
            check_size(entry.file_size, f"{model}'s policy.pth")
            with archive.open(entry) as stream:
                blob = stream.read(MAX_WEIGHT_BYTES + 1)  # zipfile stops at the declared size
    except (OSError, zipfile.BadZipFile, KeyError, EOFError, ValueError) as error:
        raise UsageError(f"{model} is not a Stable-Baselines3 model zip: {first_line(error)}") from None
    return torch_weights(io.BytesIO(blob), f"{model}'s policy.pth")


def torch_weights(source: str | Path | IO[bytes], name: str | None = None) -> dict[str, Any]:
    """A state dict written by ``torch.save`` (a zip of its own), its entries' declared sizes checked
    first, read with ``torch.load(weights_only=True)``: tensors and plain containers, never code."""
    name = name or str(source)
    try:
        with zipfile.ZipFile(source) as archive:
            entries = archive.infolist()
            if len(entries) > MAX_ENTRIES:
                raise UsageError(f"{name} holds {len(entries):,} entries, more than {MAX_ENTRIES:,}")
            check_size(sum(entry.file_size for entry in entries), name)
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as error:
        raise UsageError(f"{name} is not a file torch.save wrote: {first_line(error)}") from None
    if not isinstance(source, (str, Path)):
        source.seek(0)
    try:
        state = torch.load(source, map_location="cpu", weights_only=True)
    except Exception as error:  # a hostile file: whatever torch refuses it with (the unpickler's own errors), one line
        raise UsageError(f"{name} is not a plain torch state dict ({first_line(error)})") from None
    if not isinstance(state, dict) or not all(isinstance(key, str) for key in state):
        raise UsageError(f"{name} is not a state dict: it holds a {type(state).__name__}")
    return state


def check_size(size: int, name: str) -> None:
    if size > MAX_WEIGHT_BYTES:
        raise UsageError(f"{name} declares {size:,} bytes of weights, more than {MAX_WEIGHT_BYTES:,}: "
                         f"not a policy of arena-train")


def first_line(error: BaseException) -> str:
    """What an error says, in at most 200 characters of one line: torch's refusals run to pages,
    with terminal colours, around the one line that names what the file asked for."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", str(error)).splitlines() if line.strip()]
    refused = [line.partition(UNPICKLER)[2].partition(". Please")[0].strip() for line in lines if UNPICKLER in line]
    return (refused or lines or [type(error).__name__])[0][:200]
