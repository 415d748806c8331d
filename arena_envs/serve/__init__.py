"""Serve the arena scenarios over the network as OpenEnv environments (``pip install arena-envs[serve]``).

    arena-serve foraging --port 8000 --max-sessions 1024      # or: python -m arena_envs.serve ...

    from openenv.core import GenericEnvClient                  # OpenEnv's own client, unchanged
    with GenericEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        result = env.reset(seed=7)
        result = env.step({"tool": "query_world", "params": {"radius": 30}})
        print(result.observation["text"], result.reward, result.done)

Every session is one world of one batched core: the sessions that step together advance
in one numpy step. See :mod:`arena_envs.serve.sessions` for what a session holds and
:mod:`arena_envs.serve.guard` for the limits.
"""

try:
    import openenv  # noqa: F401
except ImportError as error:  # the optional extra is missing: say how to get it
    raise ImportError("arena_envs.serve needs OpenEnv: pip install 'arena-envs[serve]'") from error

__all__ = [  # noqa: F822 - imported on first use, see __getattr__
    "SCENARIOS",
    "ArenaAction",
    "ArenaObservation",
    "ArenaSession",
    "ArenaState",
    "Limits",
    "SessionError",
    "SessionHub",
    "make_app",
    "make_hub",
    "serve",
]

_HOMES = {"make_app": "app", "serve": "app", "Limits": "guard", "ArenaAction": "models",
          "ArenaObservation": "models", "ArenaState": "models", "SCENARIOS": "sessions", "ArenaSession": "sessions",
          "SessionError": "sessions", "SessionHub": "sessions", "make_hub": "hubs"}


def __getattr__(name: str) -> object:
    """The public names, imported when first used: the server's reader process imports this
    package for :mod:`.reading` alone, and must not wait for OpenEnv's server to load."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value
