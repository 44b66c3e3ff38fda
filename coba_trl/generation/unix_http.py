"""HTTP over a Unix socket: the CPU server's base URL, and requests' sessions (TRL's `VLLMClient`) that use it.

A user names the socket as `unix:/path/to/vllm.sock` (`vllm_server_base_url`). Inside, the URL becomes
`http+unix://<the socket's path, percent-encoded>`, which TRL's client parses and extends (`.../v1/completions`) as
it does any base URL; `mount` gives a requests session a transport that connects to that socket. `get_status` asks
with the standard library alone (the server's health, before requests is needed).
"""

from __future__ import annotations

import http.client
import os
import socket
from urllib.parse import quote, unquote, urlparse

SCHEME = "http+unix"


def socket_url(path: str) -> str:
    """The internal base URL of the socket at `path`."""
    return f"{SCHEME}://{quote(os.path.abspath(path), safe='')}"


def socket_of(base_url: str) -> str | None:
    """The socket a base URL names (`unix:PATH` or the internal form), or None for any other URL."""
    if base_url.startswith("unix:"):
        path = base_url.removeprefix("unix:")
        return os.path.abspath(path.removeprefix("//")) if path else None
    parsed = urlparse(base_url)
    return unquote(parsed.netloc) if parsed.scheme == SCHEME and parsed.netloc else None


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def get_status(path: str, route: str, timeout: float = 2.0) -> int:
    """The HTTP status of GET `route` from the server on the socket at `path` (raises OSError where none answers)."""
    connection = _UnixConnection(path, timeout)
    try:
        connection.request("GET", route)
        return connection.getresponse().status
    finally:
        connection.close()


def mount(session, pool_size: int = 64) -> None:
    """Let the requests `session` reach `http+unix://` URLs, through their socket."""
    from requests.adapters import HTTPAdapter
    from urllib3.connection import HTTPConnection
    from urllib3.connectionpool import HTTPConnectionPool

    class Connection(HTTPConnection):
        def __init__(self, *args, socket_path: str, **kwargs):
            super().__init__(*args, **kwargs)
            self.socket_path = socket_path

        def _new_conn(self):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout if isinstance(self.timeout, int | float) else None)
            try:
                sock.connect(self.socket_path)
            except OSError:
                sock.close()
                raise
            return sock

    class Pool(HTTPConnectionPool):
        ConnectionCls = Connection

    class Adapter(HTTPAdapter):
        def get_connection_with_tls_context(self, request, verify, proxies=None, cert=None):
            path = socket_of(request.url)  # a socket of this machine: no proxy, no TLS
            with self.poolmanager.pools.lock:
                pool = self.poolmanager.pools.get(path)
                if pool is None:
                    pool = Pool("localhost", maxsize=pool_size, socket_path=path)
                    self.poolmanager.pools[path] = pool
            return pool

        def request_url(self, request, proxies):
            return request.path_url

    session.mount(f"{SCHEME}://", Adapter(pool_connections=1, pool_maxsize=pool_size))
