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

from .app import make_app, serve  # noqa: E402
from .guard import Limits  # noqa: E402
from .models import ArenaAction, ArenaObservation, ArenaState  # noqa: E402
from .sessions import SCENARIOS, ArenaSession, SessionError, SessionHub, make_hub  # noqa: E402

__all__ = [
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
