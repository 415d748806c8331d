"""``arena-view PATH``: replay recorded episodes in the browser.

    arena-view runs/eval/rec                   # serves http://127.0.0.1:8765/ until Ctrl-C
    arena-view runs/agent --port 9000
    arena-view runs/eval/rec --export site/    # a static site: open site/index.html, or publish it
    arena-view --play pretrained Foraging-v0   # play an agent first (arena-eval --record), then show it

PATH is a recording (``episodes.jsonl`` or ``.jsonl.gz`` from ``RecordEpisodes``,
``arena-eval --record`` or ``arena-agent --record``) or a directory searched for them.
The page draws each tick's world from the recorded states (zoom with the wheel or the
buttons, drag to pan), with a legend, a timeline to scrub, play/pause and speed; per
tick the tool calls, results, messages, rewards and info; beside an LLM episode its
transcript, the current turn highlighted (click a turn to go to its tick); a list of the
episodes to filter by scenario, seed, success, score and error class.

``--play AGENT SCENARIO`` records ``--episodes`` episodes of an agent named as ``arena-eval``
names them (``pretrained``, ``pretrained:<scenario>``, ``scripted``, ``random``, a run directory),
beside the random and scripted baselines, in a temporary folder, and shows those.

The front end is plain JavaScript drawing on a canvas, with no framework and no build step:
nothing to download or compile, it works offline and from a static export, and the whole
page is three files a reader can open.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from collections.abc import Collection, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from arena_envs.viewer.episodes import Episodes

STATIC = Path(__file__).parent / "static"
PAGES = {"/": ("index.html", "text/html"), "/index.html": ("index.html", "text/html"),
         "/viewer.js": ("viewer.js", "text/javascript"), "/viewer.css": ("viewer.css", "text/css")}
EPISODE_URL = re.compile(r"^/data/episode-(\d+)\.js$")
HOST = "127.0.0.1"  # never another interface: a recording may hold prompts and model output
# index.html's <meta> policy (which an export keeps), and no framing, which only a header can say
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src data:; "
                           "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def make_server(episodes: Episodes, port: int = 8765, allowed_hosts: Collection[str] = ()) -> ThreadingHTTPServer:
    """A server of the page and ``episodes`` on 127.0.0.1:``port`` (0: any free port), not yet serving.
    It answers only its own pages' requests: see :func:`foreign_request`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
            refusal = foreign_request(self.headers, self.connection.getsockname()[0], allowed_hosts)
            if refusal is not None:
                self.send_error(refusal[0], refusal[1])
                return
            path = self.path.split("?", 1)[0]
            match = EPISODE_URL.match(path)
            if path in PAGES:
                name, kind = PAGES[path]
                self._send((STATIC / name).read_bytes(), kind)
            elif path == "/data/index.js":
                self._send(episodes.index_script(), "text/javascript")
            elif match and int(match[1]) < len(episodes.lines):
                self._send(episodes.episode_script(int(match[1])), "text/javascript")
            else:
                self.send_error(404, "not a page of arena-view")

        def _send(self, body: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", f"{kind}; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Security-Policy", CONTENT_SECURITY_POLICY)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # quiet: one line per request is noise
            pass

    return ThreadingHTTPServer((HOST, port), Handler)


def foreign_request(headers: Mapping[str, str], local_address: str,
                    allowed_hosts: Collection[str] = ()) -> tuple[int, str] | None:
    """Why a request is not the viewer's own page's (HTTP status, message), or None.

    A recording may hold prompts and model output, and any page a browser shows can make it send
    requests here. ``Host`` must name this server (127.0.0.1, ``localhost``, or one of ``allowed_hosts``):
    a page on another name that resolves here (DNS rebinding) gets nothing. A request another site's
    page makes (``Origin``, or ``Sec-Fetch-Site`` for the scripts a page includes, which carry no
    ``Origin``) gets nothing either: the page could read an episode's script once it ran.
    """
    host = headers.get("Host")
    if host is not None and "*" not in allowed_hosts:
        name = host.strip().lower()
        name = name[1:].split("]", 1)[0] if name.startswith("[") else name.rsplit(":", 1)[0]
        if name not in (local_address, "localhost", *allowed_hosts):
            return 421, f"Host {host[:100]!r} is not this server's name; allow it with --allowed-hosts"
    origin, site = headers.get("Origin"), headers.get("Sec-Fetch-Site")
    if (origin is not None and origin != f"http://{host}") or site not in (None, "same-origin", "none"):
        return 403, "a request from another site's page; only the viewer's own page may read recordings"
    return None


def export(episodes: Episodes, directory: str | Path) -> Path:
    """Write the page and every episode as a static site in ``directory``; returns its index.html."""
    out = Path(directory)
    (out / "data").mkdir(parents=True, exist_ok=True)
    for name, _ in PAGES.values():
        shutil.copyfile(STATIC / name, out / name)
    (out / "data" / "index.js").write_bytes(episodes.index_script())
    for number in range(len(episodes.lines)):
        (out / "data" / f"episode-{number}.js").write_bytes(episodes.episode_script(number))
    return out / "index.html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="arena-view", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", metavar="PATH", help="recordings (.jsonl, .jsonl.gz) or directories")
    parser.add_argument("--play", nargs=2, metavar=("AGENT", "SCENARIO"),
                        help="record an agent's episodes first (arena-eval's names: pretrained, scripted, a run ...)")
    parser.add_argument("--episodes", type=int, default=2, help="--play: episodes per agent (default 2)")
    parser.add_argument("--trust-pickle", action="store_true",
                        help="--play: let Stable-Baselines3's PPO.load read a model (arena-eval --trust-pickle): "
                             "that runs any code the file holds")
    parser.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (default 8765; 0: any free)")
    parser.add_argument("--export", metavar="DIR", help="write a static site to DIR instead of serving")
    parser.add_argument("--allowed-hosts", default="", metavar="NAMES",
                        help="Host names accepted besides 127.0.0.1 and localhost (comma-separated), for a "
                             "name of this machine that a browser uses to reach the viewer")
    args = parser.parse_args(argv)
    if not args.paths and not args.play:
        parser.error("give recordings (PATH) or --play AGENT SCENARIO")
    if args.play:
        from arena_envs.cli import arena_eval

        folder = tempfile.mkdtemp(prefix="arena-view-")
        agent, scenario = args.play
        status = arena_eval([agent, scenario, "--episodes", str(args.episodes), "--out", folder, "--record", folder,
                             *(["--trust-pickle"] if args.trust_pickle else [])])
        if status:
            return status
        args.paths = [folder, *args.paths]
    try:
        episodes = Episodes.load(args.paths)
    except (FileNotFoundError, ValueError) as error:
        print(f"arena-view: {error}", file=sys.stderr)
        return 2
    if args.export:
        print(f"wrote {export(episodes, args.export)} ({len(episodes.lines)} episodes)")
        return 0
    try:
        hosts = [name.strip().lower() for name in args.allowed_hosts.split(",") if name.strip()]
        server = make_server(episodes, args.port, hosts)
    except OSError as error:
        print(f"arena-view: cannot listen on {HOST}:{args.port}: {error.strerror} (try --port 0)", file=sys.stderr)
        return 2
    print(f"arena-view: {len(episodes.lines)} episodes at http://{HOST}:{server.server_port}/ (Ctrl-C stops)",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
