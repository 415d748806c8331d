"""``arena-serve``: serve one scenario as an OpenEnv environment.

    arena-serve foraging                                   # 127.0.0.1:8000, 64 sessions
    arena-serve crafting --port 8100 --max-sessions 1024 --api-key "$KEY"
    arena-serve treasure_hunt --env-kwarg difficulty=medium
    arena-serve export foraging DIR                        # an OpenEnv package of it (openenv push)
"""

from __future__ import annotations

import argparse
import os
import sys

from arena_envs.cli import UsageError, arena_serve, env_argument


def parser() -> argparse.ArgumentParser:
    from .sessions import SCENARIOS  # here, not above: a process importing this module (the
    # server's reader, started by spawn) need not load the server

    p = argparse.ArgumentParser(prog="arena-serve", description="Serve an arena scenario over OpenEnv "
                                "(WebSocket sessions at /ws, one world of one batched core each).")
    p.add_argument("scenario", help=f"one of: {', '.join(SCENARIOS)} (any spelling: Foraging-v0, "
                                    "arena_envs/Foraging-v0, team_capture_v0 ...)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-sessions", type=int, default=64, help="concurrent sessions (worlds) at most")
    p.add_argument("--api-key", default=os.environ.get("ARENA_API_KEY"),
                   help="require this key on every route (default: $ARENA_API_KEY, else none)")
    p.add_argument("--idle-timeout", type=float, default=300.0, help="seconds before an idle session is closed")
    p.add_argument("--max-message-bytes", type=int, default=64 * 1024, help="largest request or frame accepted")
    p.add_argument("--http-rate", type=float, default=100.0, help="HTTP requests per second per client address")
    p.add_argument("--ws-rate", type=float, default=1000.0, help="WebSocket messages per second per session")
    p.add_argument("--header-timeout", type=float, default=10.0,
                   help="seconds a connection has to send a request's headers and body")
    p.add_argument("--keep-alive-timeout", type=float, default=5.0,
                   help="seconds an idle HTTP connection is kept open for its next request")
    p.add_argument("--max-connections", type=int, default=None,
                   help="open connections at most (default: twice the worlds, plus 64)")
    p.add_argument("--connections-per-client", type=int, default=None,
                   help="open HTTP connections per client address (default: half of --max-connections)")
    p.add_argument("--half-open-per-client", type=int, default=8,
                   help="a client address holding this many connections slow to send a request gets no more")
    p.add_argument("--sessions-per-client", type=int, default=None,
                   help="WebSocket sessions per client address (default: 3/4 of --max-sessions, at least 1)")
    p.add_argument("--http-sessions-per-client", type=int, default=2,
                   help="sessions made over HTTP per client address, at each door (/mcp openenv/session/create, "
                        "MCP sessions at /mcp/http)")
    p.add_argument("--max-http-sessions", type=int, default=16,
                   help="sessions made over HTTP in all, at each door (/mcp, /mcp/http)")
    p.add_argument("--http-session-ttl", type=float, default=30.0,
                   help="seconds an HTTP-made session lives unused, unless a WebSocket holds it")
    p.add_argument("--ipv6-prefix", type=int, default=64,
                   help="an IPv6 client is its /N network for every per-client cap (default 64; 128: each address)")
    p.add_argument("--forwarded-allow-ips", default=None, metavar="PROXIES",
                   help="proxies (addresses or networks, comma-separated) whose X-Forwarded-For names the client "
                        "(default: none, the header is ignored: any local process could claim any address)")
    p.add_argument("--allowed-hosts", default="", metavar="NAMES",
                   help="Host names accepted besides the address the server is reached at (comma-separated; "
                        "'*': any): a name this server is reached by, through DNS or a proxy")
    p.add_argument("--allowed-origins", default="", metavar="ORIGINS",
                   help="browser origins (https://example.org) whose pages may call this server, besides its own "
                        "(comma-separated; '*': any)")
    p.add_argument("--drain-timeout", type=float, default=10.0,
                   help="seconds shutdown waits for calls in flight")
    p.add_argument("--env-kwarg", type=env_argument, action="append", default=[], metavar="NAME=VALUE",
                   help="argument for the scenario's env (JSON value or bare string); repeatable")
    p.add_argument("--log-level", default="info")
    return p


def main(argv: list[str] | None = None) -> int:
    """The ``arena-serve`` console script: a user's mistake is one line and exit status 2."""
    return arena_serve(argv)


def serve_command(argv: list[str] | None = None) -> int:
    """``arena-serve`` with these arguments, raising what :func:`main` reports in one line."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["export"]:  # arena-serve export SCENARIO DIR: an OpenEnv package (serve/export.py)
        from .export import main as export

        return export(argv[1:])
    args = parser().parse_args(argv)
    if os.environ.get("ENABLE_WEB_INTERFACE", "").lower() not in ("true", "1", "yes"):
        # OpenEnv imports its Gradio web UI eagerly even when it is off (as here): skipping
        # gradio saves seconds of start-up. OpenEnv treats it as not installed.
        sys.modules.setdefault("gradio", None)
    from .app import make_app, serve
    from .guard import Limits

    try:
        limits = Limits(api_key=args.api_key or None, max_message_bytes=args.max_message_bytes,
                        http_rate=args.http_rate, ws_rate=args.ws_rate, idle_timeout=args.idle_timeout,
                        header_timeout=args.header_timeout, keep_alive_timeout=args.keep_alive_timeout,
                        max_connections=args.max_connections, connections_per_client=args.connections_per_client,
                        half_open_per_client=args.half_open_per_client, sessions_per_client=args.sessions_per_client,
                        http_sessions_per_client=args.http_sessions_per_client,
                        max_http_sessions=args.max_http_sessions, http_session_ttl=args.http_session_ttl,
                        ipv6_prefix=args.ipv6_prefix, forwarded_allow_ips=args.forwarded_allow_ips,
                        allowed_hosts=tuple(args.allowed_hosts.split(",")),
                        allowed_origins=tuple(args.allowed_origins.split(",")))
        app = make_app(args.scenario, max_sessions=args.max_sessions, limits=limits, **dict(args.env_kwarg))
    except (ValueError, TypeError) as err:  # an unknown scenario, a bad limit or scenario argument
        raise UsageError(str(err)) from None
    serve(app, host=args.host, port=args.port, drain_timeout=args.drain_timeout, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
