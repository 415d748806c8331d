"""``python -m arena_envs.serve SCENARIO ...``: the same as ``arena-serve``."""

from arena_envs.serve.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
