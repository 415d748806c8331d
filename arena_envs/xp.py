"""Array libraries for the rules: the namespace of an array, devices, and the counter generator.

The dense rules (:mod:`arena_envs.dense`) are written against the Python array API
standard: they take ``xp = namespace(array)`` from their inputs and never name numpy,
so one source runs on numpy, on torch tensors (CPU or CUDA) and on ``array_api_strict``.

Randomness that must give the same worlds on every backend comes from
:func:`uniforms`, a counter-based generator: a hash of (world seed, reset count, draw
index) in 32-bit integer arithmetic carried in int64, which every library computes
bit for bit alike (no library's own generator is involved).
"""

from __future__ import annotations

from typing import Any

import array_api_compat

MASK32 = 0xFFFFFFFF
_MIX1, _MIX2 = 0x7FEB352D, 0x846CA68B  # lowbias32's multipliers (C. Wellons' hash prospector)


def namespace(array: Any) -> Any:
    """The array API namespace of ``array``, looked up once per array type: the rules ask on
    every call, and torch.compile traces a dict lookup where array_api_compat's checks break
    its graph."""
    kind = type(array)
    xp = _NAMESPACES.get(kind)
    if xp is None:
        xp = _NAMESPACES[kind] = array_api_compat.array_namespace(array)
    return xp


_NAMESPACES: dict[type, Any] = {}


def is_numpy(xp: Any) -> bool:
    return xp.__name__.endswith("numpy")


def torch_device(device: Any) -> Any:
    """``device`` as a ``torch.device``, checked: a clear error where torch or the device is missing."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is in the train extra
        raise ValueError(f"device={device!r} runs the rules on torch tensors: pip install torch") from None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or a torch.device, got {device!r} ({err})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} needs a CUDA GPU, and torch sees none on this machine "
                         "(torch.cuda.is_available() is False); use device='cpu' for the torch path on the CPU, "
                         "or leave device out for numpy")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"device={device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    return dev


def torch_namespace() -> Any:
    import array_api_compat.torch as xp_torch

    return xp_torch


# -- the counter generator ----------------------------------------------------------------


def hash32(xp: Any, x: Any) -> Any:
    """lowbias32 of every element of ``x`` (int64 holding values in [0, 2**32)), in int64.

    A product may pass 2**63 and wrap: its low 32 bits, all that is kept, are right anyway.
    """
    x = x ^ (x >> 16)
    x = (x * _MIX1) & MASK32
    x = x ^ (x >> 15)
    x = (x * _MIX2) & MASK32
    return x ^ (x >> 16)


def world_keys(xp: Any, seed: Any, count: Any) -> Any:
    """One 32-bit key per world from its seed (int64, any bits) and its reset count (int64)."""
    lo, hi = seed & MASK32, (seed >> 32) & MASK32
    return hash32(xp, lo ^ hash32(xp, hi ^ hash32(xp, count & MASK32)))


def uniforms(xp: Any, keys: Any, n: int) -> Any:
    """``n`` float32 uniforms in [0, 1) per world: shape (len(keys), n), from the worlds' keys.

    Draw ``j`` of a world is ``hash(hash(key ^ hash(j)))``, its top 24 bits scaled by 2**-24
    (exact in float32).
    """
    draws = hash32(xp, xp.arange(n, dtype=xp.int64, device=keys.device))
    bits = hash32(xp, hash32(xp, keys[:, None] ^ draws[None, :]))
    return xp.astype(bits >> 8, xp.float32) * (1.0 / (1 << 24))


def fold_seed(seed: int) -> int:
    """A non-negative Python int seed as the int64 the generator keys on (its low 64 bits, signed)."""
    low = int(seed) & 0xFFFFFFFFFFFFFFFF
    return low - (1 << 64) if low >= 1 << 63 else low


class CounterGenerator:
    """One world's draws from the counter generator, shaped like ``numpy.random.Generator``.

    ``random(n, dtype=float32)`` gives the world's next reset's uniforms, as
    :func:`uniforms` does for a whole batch on any backend: a numpy batch built with
    ``rng="counter"`` lays out the same worlds as a torch batch.
    """

    def __init__(self, seed: int):
        self.seed = fold_seed(seed)
        self.count = 0
        self.key: Any = None

    def random(self, n: int, dtype: Any = None) -> Any:
        """The ``n`` uniforms of the world's next reset (each call is one more reset)."""
        import numpy as np

        self.key = world_keys(np, np.array([self.seed], np.int64), np.array([self.count], np.int64))
        self.count += 1
        return uniforms(np, self.key, int(n))[0]

    def integers(self, low: int, high: int, dtype: Any = None) -> Any:
        """The 63-bit number of the reset :meth:`random` began (a world's message key): :func:`bits63`."""
        import numpy as np

        if (low, high) != (0, 2**63) or self.key is None:
            raise ValueError("a counter generator draws one 63-bit number per reset, after random()")
        return np.uint64(bits63(np, self.key)[0])


def bits63(xp: Any, keys: Any) -> Any:
    """One non-negative 63-bit int64 per world key, independent of its :func:`uniforms`."""
    high = hash32(xp, hash32(xp, keys ^ 0x51ED270B))
    low = hash32(xp, hash32(xp, keys ^ 0x2B1A8C6D))
    return (high << 31) | (low >> 1)
