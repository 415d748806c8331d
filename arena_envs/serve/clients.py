"""Who a request comes from, and whether it may come in at all.

* :func:`client_key`: the unit every per-client cap counts. An IPv4 client is its address; an
  IPv6 client is its ``/64`` network by default (``ipv6_prefix``): one host is handed a whole
  /64 and can use any address of it, so counting each /128 would let one machine take every share.
* :func:`host_refusal`, :func:`origin_refusal`: a browser is made to send requests by any page
  it shows. ``Host`` must name the address the connection reached (``localhost`` too when that is
  loopback) or one of ``allowed_hosts``: a DNS-rebinding page, whose own name is in ``Host``,
  gets nothing. An ``Origin``, when a browser sends one, must be the server's own (the ``Host``
  asked for) or one of ``allowed_origins``: another site's page can open no WebSocket and make no
  session (a ``text/plain`` POST is a "simple" request that a browser sends without asking).
* :func:`json_depth_refusal`: JSON nested deeper than :data:`MAX_JSON_DEPTH` is refused before any
  parser that recurses (the MCP SDK's, pydantic's) meets it.
"""

from __future__ import annotations

import functools
import ipaddress
import json
from collections.abc import Collection
from typing import Any
from urllib.parse import urlsplit

MAX_JSON_DEPTH = 32
"""Nesting depth of a JSON request or frame at most (an object or list is a level): far more than any
call needs. Python's own parser fails near 1000 levels and pydantic's serialiser near 250."""


@functools.lru_cache(maxsize=4096)
def client_key(address: str, ipv6_prefix: int = 64) -> str:
    """The client ``address`` as per-client caps count it: an IPv4 address itself (an IPv4-mapped IPv6
    address too), an IPv6 address as its ``/ipv6_prefix`` network (``2001:db8::/64``); anything that is
    not an IP address (a Unix socket's name, ``?``) as given."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # no zone: fe80::1%eth0 is fe80::1
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        if ipv6_prefix < 128:
            return str(ipaddress.IPv6Network((ip, ipv6_prefix), strict=False))
    return str(ip)


def host_refusal(host: str | None, local_address: str | None, allowed_hosts: Collection[str]) -> str | None:
    """Why a request whose ``Host`` header is ``host``, on a connection that reached ``local_address``,
    is refused (None: it may come in). No ``Host`` at all (HTTP/1.0) is let in: a browser always sends one."""
    if host is None or "*" in allowed_hosts:
        return None
    name = _hostname(host)
    if name in allowed_hosts or name == _canonical(local_address):
        return None
    if name == "localhost" and _is_loopback(local_address):
        return None
    return (f"Host {host[:100]!r} is not this server's address: a page on another name (DNS rebinding) "
            "gets nothing; allow the name with --allowed-hosts")


def origin_refusal(origin: str | None, host: str | None, allowed_origins: Collection[str]) -> str | None:
    """Why a request carrying the browser's ``Origin`` header is refused (None: it may come in): only the
    server's own page (an origin naming the ``Host`` asked for) or one of ``allowed_origins`` may call it.
    No ``Origin`` (any client that is not a browser) is let in."""
    if origin is None or "*" in allowed_origins or origin in allowed_origins:
        return None
    if host is not None and origin != "null" and urlsplit(origin).netloc.lower() == host.lower():
        return None
    return (f"Origin {origin[:100]!r} is another site's: a page there may not call this server; "
            "allow it with --allowed-origins")


def json_depth_refusal(value: Any, limit: int = MAX_JSON_DEPTH) -> str | None:
    """Why a parsed JSON ``value`` is refused for its nesting (None: at most ``limit`` levels). Iterative,
    and it stops at the first branch too deep, so it costs at most the value's size."""
    level = [(value, 1)]
    while level:
        item, depth = level.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        if depth > limit:
            return json_too_deep(limit)
        level.extend((child, depth + 1) for child in item if isinstance(child, (dict, list)))
    return None


def json_too_deep(limit: int = MAX_JSON_DEPTH) -> str:
    return f"JSON nested deeper than {limit} levels (objects and lists): send a flatter value"


def parsed_json(text: str | bytes) -> tuple[Any, str | None]:
    """``text`` parsed as JSON, and why it is refused for its nesting (None: it is not); a ValueError when
    it is not JSON at all."""
    try:
        value = json.loads(text)
    except RecursionError:  # Python's parser gives up near 1000 levels
        return None, json_too_deep()
    return value, json_depth_refusal(value)


def _hostname(host: str) -> str:
    """The name or address of a ``Host`` header, without its port, as :func:`_canonical` writes it."""
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8000
        return _canonical(host[1:].split("]", 1)[0])
    return _canonical(host.rsplit(":", 1)[0] if host.count(":") == 1 else host)


@functools.lru_cache(maxsize=256)
def _canonical(address: str | None) -> str | None:
    """An IP address in one spelling (an IPv4-mapped IPv6 address as IPv4); a name as given, lower case."""
    if address is None:
        return None
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address.lower().rstrip(".")
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


def _is_loopback(address: str | None) -> bool:
    canonical = _canonical(address)
    try:
        return canonical is not None and ipaddress.ip_address(canonical).is_loopback
    except ValueError:
        return False
