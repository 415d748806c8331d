"""What every console script shares: a user's mistake is one line naming the fix, and exit status 2.

Every command runs through :func:`run`, which imports the command's module itself, so that a
missing optional dependency, at import time or later, reads

    arena-eval: torch is not installed (the 'train' extra): pip install -e '.[train]'

instead of a traceback. The mistakes it knows: an unknown scenario name
(:class:`~arena_envs.names.UnknownNameError`, with a "did you mean"), a :class:`UsageError`
raised where a command checks its input (a bad scenario argument, a model that does not fit
the env, a missing file), and a missing extra. Anything else is a bug and keeps its traceback.
The console scripts of ``setup.cfg`` are the functions at the end of this module.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable
from typing import Any

from arena_envs.names import Scenario, UnknownNameError, resolve, unknown

USAGE_EXIT = 2  # as argparse exits on a bad command line

# import names that differ from their distribution's name on PyPI
DISTRIBUTIONS = {"yaml": "pyyaml", "stable_baselines3": "stable-baselines3", "tree": "dm_tree", "PIL": "pillow",
                 "tensorboardX": "tensorboardx"}


class UsageError(Exception):
    """A mistake in a command's input; its message is one line that names the fix."""


def extras_of(distribution: str) -> list[str]:
    """The extras of arena-envs (besides ``dev``) that install ``distribution``, from the installed metadata."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        requirements = requires("arena-envs") or []
    except PackageNotFoundError:
        return []
    found = []
    for line in requirements:
        name = re.split(r"[\s;<>=!~\[]", line, maxsplit=1)[0].lower().replace("_", "-")
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", line)
        if extra and extra.group(1) != "dev" and name == distribution.lower().replace("_", "-"):
            found.append(extra.group(1))
    return found


def missing_extra(error: ModuleNotFoundError, preferred: str | None = None) -> str | None:
    """One line naming the extra that installs the module ``error`` is about (``preferred`` when
    it is one of them), or None when no extra of arena-envs installs it (then it is a bug)."""
    module = (error.name or "").split(".")[0]
    distribution = DISTRIBUTIONS.get(module, module)
    extras = extras_of(distribution)
    if not extras:
        return None
    extra = preferred if preferred in extras else extras[0]
    return (f"{distribution} is not installed (the {extra!r} extra): "
            f"pip install -e '.[{extra}]' in the arena-envs checkout")


def run(prog: str, command: str | Callable[[list[str] | None], Any], argv: list[str] | None = None,
        extra: str | None = None) -> int:
    """Run ``command`` (a function of the arguments, or ``"module:function"`` imported here) and
    return the exit status: its own when it returns an int, else 0; 2 with one line on stderr
    for a user's mistake (see the module docstring); ``extra`` is the one the command needs."""
    try:
        if isinstance(command, str):
            module, _, function = command.partition(":")
            command = getattr(importlib.import_module(module), function)
        result = command(argv)
    except (UsageError, UnknownNameError) as error:
        return _fail(prog, str(error))
    except ModuleNotFoundError as error:
        line = missing_extra(error, extra)
        if line is None:
            raise
        return _fail(prog, line)
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def _fail(prog: str, message: str) -> int:
    print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr)  # one line, whatever the message held
    return USAGE_EXIT


def env_argument(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` of ``--env-arg``: the value as JSON (``max_ticks=20``, ``speeds=[1, 2]``) or, when it
    is not JSON, as a bare string (``layout=classic``). An ``argparse`` type: a bad one is argparse's error."""
    import argparse
    import json

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def checked_env_arguments(name: str, env_kwargs: dict[str, Any]) -> None:
    """Make the scenario ``name`` once with ``env_kwargs`` (one world, then closed): a bad
    argument becomes a :class:`UsageError` naming the valid ones, before any work starts."""
    import gymnasium as gym

    import arena_envs  # noqa: F401  (registers the envs)

    scenario = resolve(name)
    try:
        env = (gym.make_vec(scenario.env_id, num_envs=1, vectorization_mode="vector_entry_point", **env_kwargs)
               if scenario.multi_agent else gym.make(scenario.env_id, **env_kwargs))
    except TypeError as error:
        name = re.search(r"unexpected keyword argument '(\w+)'", str(error))
        if name is None:
            raise UsageError(f"{scenario.short_id} does not take {_shown(env_kwargs)}: {error}") from None
        raise UsageError(unknown(name.group(1), f"{scenario.short_id} argument", env_arguments(scenario))) from None
    except ValueError as error:
        raise UsageError(f"{scenario.short_id} does not take {_shown(env_kwargs)}: {error}") from None
    env.close()


def env_arguments(scenario: Scenario) -> list[str]:
    """The keyword arguments the scenario's env takes: its rules' parameters (and the constructor's own)."""
    import dataclasses
    import inspect

    import gymnasium as gym

    if scenario.text:  # its env class's signature
        creator = gym.envs.registration.load_env_creator(gym.spec(scenario.env_id).entry_point)
        return [p for p in inspect.signature(creator).parameters if p != "self"]
    from arena_envs.envs import SCENARIOS, build

    own = [p for p in inspect.signature(SCENARIOS[scenario.key].rules).parameters if p not in ("params", "kwargs")]
    fields = [field.name for field in dataclasses.fields(build(scenario.key)[0].params)]
    return list(dict.fromkeys(["render_mode", *own, *fields]))


def _shown(env_kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in env_kwargs.items()) or "these arguments"


# -- the console scripts (setup.cfg) --------------------------------------------------------------


def arena_train(argv: list[str] | None = None) -> int:
    return run("arena-train", "arena_envs.training.train:train", argv, extra="train")


def arena_eval(argv: list[str] | None = None) -> int:
    return run("arena-eval", "arena_envs.training.evaluate:evaluate", argv, extra="train")


def arena_agent(argv: list[str] | None = None) -> int:
    return run("arena-agent", "arena_envs.llm.cli:play", argv, extra="llm")


def arena_serve(argv: list[str] | None = None) -> int:
    return run("arena-serve", "arena_envs.serve.cli:serve_command", argv, extra="serve")


def arena_bench(argv: list[str] | None = None) -> int:
    return run("arena-bench", "arena_envs.bench:run", argv)


def rllib_ppo(argv: list[str] | None = None) -> int:
    return run("rllib_ppo", "arena_envs.training.rllib_ppo:train", argv, extra="ray")


def arena_view(argv: list[str] | None = None) -> int:
    return run("arena-view", "arena_envs.viewer.cli:main", argv)
