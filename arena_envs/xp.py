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
        xp = array_api_compat.array_namespace(array)
        if array_api_compat.is_torch_array(array):
            xp = TorchNamespace(xp)
        _NAMESPACES[kind] = xp
    return xp


_NAMESPACES: dict[type, Any] = {}


class TorchNamespace:
    """array_api_compat's torch namespace with the functions the rules call on every step
    mapped straight to torch's. The rules never mix dtypes that torch promotes otherwise than
    the standard, so the compat layer's promotion checks (``result_type`` on dtypes, which
    torch.compile cannot trace: a graph break per call) buy nothing there."""

    def __init__(self, compat: Any):
        import torch

        self._compat, self.__name__ = compat, compat.__name__
        self.where, self.hypot = torch.where, torch.hypot
        self.sqrt, self.abs, self.isfinite, self.round = torch.sqrt, torch.abs, torch.isfinite, torch.round
        self.reshape, self.broadcast_to = torch.reshape, torch.broadcast_to

    def __getattr__(self, name: str) -> Any:
        return getattr(self._compat, name)

    @staticmethod
    def minimum(x1: Any, x2: Any, /) -> Any:
        import torch

        return torch.clamp(x1, max=x2) if isinstance(x2, (int, float)) else torch.minimum(x1, x2)

    @staticmethod
    def maximum(x1: Any, x2: Any, /) -> Any:
        import torch

        return torch.clamp(x1, min=x2) if isinstance(x2, (int, float)) else torch.maximum(x1, x2)

    @staticmethod
    def astype(x: Any, dtype: Any, /, **_: Any) -> Any:
        return x.to(dtype)

    @staticmethod
    def clip(x: Any, min: Any = None, max: Any = None, /) -> Any:  # noqa: A002 (the standard's names)
        import torch

        return torch.clamp(x, min, max)

    @staticmethod
    def concat(arrays: Any, /, *, axis: int = 0) -> Any:
        import torch

        return torch.cat(list(arrays), dim=axis)

    @staticmethod
    def stack(arrays: Any, /, *, axis: int = 0) -> Any:
        import torch

        return torch.stack(list(arrays), dim=axis)

    @staticmethod
    def sum(x: Any, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        return x.sum(dim=axis, dtype=dtype, keepdim=keepdims)

    @staticmethod
    def any(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
        return x.any() if axis is None else x.any(dim=axis, keepdim=keepdims)

    @staticmethod
    def all(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
        return x.all() if axis is None else x.all(dim=axis, keepdim=keepdims)

    @staticmethod
    def min(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
        return x.amin(dim=axis, keepdim=keepdims)

    @staticmethod
    def argmax(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
        return x.argmax(dim=axis, keepdim=keepdims)

    @staticmethod
    def argmin(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
        return x.argmin(dim=axis, keepdim=keepdims)

    @staticmethod
    def take(x: Any, indices: Any, /, *, axis: int | None = None) -> Any:
        return x.index_select(0 if axis is None else axis, indices)

    @staticmethod
    def take_along_axis(x: Any, indices: Any, /, *, axis: int = -1) -> Any:
        import torch

        return torch.take_along_dim(x, indices, dim=axis)

    @staticmethod
    def full_like(x: Any, fill_value: Any, /, *, dtype: Any = None, device: Any = None) -> Any:
        import torch

        return torch.full_like(x, fill_value, dtype=dtype)

    @staticmethod
    def zeros_like(x: Any, /, *, dtype: Any = None, device: Any = None) -> Any:
        import torch

        return torch.zeros_like(x, dtype=dtype)

    @staticmethod
    def ones_like(x: Any, /, *, dtype: Any = None, device: Any = None) -> Any:
        import torch

        return torch.ones_like(x, dtype=dtype)


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
