"""The sandbox's network: the allow-list, the filtering proxy on its Unix socket, the bridge inside bubblewrap.

Everything runs on real sockets over loopback: an origin (``http.server`` in a thread) on 127.0.0.1
stands in for an allowed site, the proxy serves on a Unix socket in the test's directory, and the
end-to-end tests start the real ``bwrap`` with ``--unshare-all`` and run the bridge in it. Where
bubblewrap cannot start, those tests fail, never skip. Nothing touches the internet: a refused host is
refused before any lookup.
"""

from __future__ import annotations

import http.server
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from queryloop.handlers.tools.services.sandbox.bridge import bridge_argv
from queryloop.handlers.tools.services.sandbox.proxy import DomainProxy, domain_allowed

BRIDGE_PORT = 3128
GREETING = "hello from the origin\n"


class _Origin(http.server.ThreadingHTTPServer):
    daemon_threads = True
    requests: list[tuple[str, str, str, str]]  # method, path, Host header, body


class _OriginHandler(http.server.BaseHTTPRequestHandler):
    server: _Origin

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        self.server.requests.append((self.command, self.path, self.headers.get("Host", ""), body))
        data = (GREETING + body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def origin() -> Iterator[_Origin]:
    server = _Origin(("127.0.0.1", 0), _OriginHandler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[DomainProxy]:
    with DomainProxy(["localhost"], tmp_path / "proxy.sock") as running:
        yield running


def _port(server: _Origin) -> int:
    return int(server.server_address[1])


def _unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _read_to_end(conn: socket.socket) -> bytes:
    chunks = []
    while chunk := conn.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _ask(proxy: DomainProxy, request: str) -> str:
    """Send ``request`` to the proxy and read until it closes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5)
        conn.connect(str(proxy.socket_path))
        conn.sendall(request.encode())
        return _read_to_end(conn).decode()


def _tunnel(proxy: DomainProxy, authority: str, inner: str) -> tuple[str, str]:
    """CONNECT to ``authority``; then send ``inner`` through the tunnel. The proxy's answer and the tunnel's."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5)
        conn.connect(str(proxy.socket_path))
        conn.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head and (chunk := conn.recv(1)):
            head += chunk
        if not head.startswith(b"HTTP/1.1 200"):
            return (head + _read_to_end(conn)).decode(), ""
        conn.sendall(inner.encode())
        return head.decode(), _read_to_end(conn).decode()


# --- the allow-list ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "allowed", "expected"),
    [
        ("example.com", ["example.com"], True),
        ("api.example.com", ["example.com"], False),
        ("example.com", ["api.example.com"], False),
        ("api.example.com", ["*.example.com"], True),
        ("a.b.example.com", ["*.example.com"], True),
        ("example.com", ["*.example.com"], False),
        ("badexample.com", ["*.example.com"], False),
        ("API.Example.COM", ["*.example.com"], True),
        ("example.com", ["EXAMPLE.com"], True),
        ("example.com.", ["example.com"], True),
        ("example.com:443", ["example.com"], True),
        ("api.example.com:8080", ["*.example.com"], True),
        ("127.0.0.1", ["localhost"], False),
        ("127.0.0.1", ["127.0.0.1"], True),
        ("127.0.0.1:8080", ["127.0.0.1"], True),
        ("127.0.0.2", ["127.0.0.1"], False),
        ("127.0.0.1", ["*.0.0.1"], False),
        ("127.1", ["*.1"], False),
        ("0x7f.1", ["*.1"], False),
        ("[::1]:443", ["::1"], True),
        ("::1", ["[::1]"], True),
        ("::1", ["localhost"], False),
        ("example.com", [], False),
        ("localhost", [], False),
        ("", ["example.com"], False),
        ("anything.com", ["*"], False),
        ("evil.com\x00.example.com", ["*.example.com"], False),
        ("evil.com/.example.com", ["*.example.com"], False),
        ("user@evil.com", ["*"], False),
        (".example.com", ["*.example.com"], False),
        ("example.com:https", ["example.com"], False),
    ],
)
def test_domain_allowed_follows_the_allowed_domains_semantics(host: str, allowed: list[str], expected: bool) -> None:
    assert domain_allowed(host, allowed) is expected


def test_a_single_string_for_the_allow_list_is_a_type_error_not_a_list_of_letters() -> None:
    with pytest.raises(TypeError, match="sequence of domain patterns"):
        domain_allowed("e", "example.com")


# --- the proxy on its Unix socket -------------------------------------------------------------------------


def test_an_absolute_uri_get_to_an_allowed_host_reaches_the_origin_in_origin_form(
    proxy: DomainProxy, origin: _Origin
) -> None:
    port = _port(origin)
    answer = _ask(
        proxy,
        f"GET http://localhost:{port}/hello?x=1 HTTP/1.1\r\nHost: elsewhere\r\nProxy-Connection: keep-alive\r\n\r\n",
    )
    assert answer.startswith("HTTP/1.0 200"), answer
    assert answer.endswith(GREETING)
    assert origin.requests == [("GET", "/hello?x=1", f"localhost:{port}", "")]
    assert proxy.refused() == ()


def test_a_post_body_is_relayed_to_the_origin(proxy: DomainProxy, origin: _Origin) -> None:
    body = "x" * 100_000
    answer = _ask(
        proxy, f"POST http://localhost:{_port(origin)}/form HTTP/1.1\r\nContent-Length: {len(body)}\r\n\r\n{body}"
    )
    assert answer.endswith(GREETING + body)
    assert origin.requests == [("POST", "/form", f"localhost:{_port(origin)}", body)]


def test_a_connect_tunnel_to_an_allowed_host_carries_a_plain_request(proxy: DomainProxy, origin: _Origin) -> None:
    head, through = _tunnel(proxy, f"localhost:{_port(origin)}", "GET /tunnelled HTTP/1.0\r\nHost: localhost\r\n\r\n")
    assert head == "HTTP/1.1 200 Connection Established\r\n\r\n"
    assert through.startswith("HTTP/1.0 200") and through.endswith(GREETING)
    assert origin.requests == [("GET", "/tunnelled", "localhost", "")]


@pytest.mark.parametrize("form", ["absolute-uri", "connect"])
@pytest.mark.parametrize("host", ["example.com", "127.0.0.1", "LOCALHOST.evil.com"])
def test_a_host_outside_the_allowed_domains_gets_403_and_the_origin_sees_nothing(
    proxy: DomainProxy, origin: _Origin, form: str, host: str
) -> None:
    authority = f"{host}:{_port(origin)}"
    if form == "connect":
        answer, _ = _tunnel(proxy, authority, "GET / HTTP/1.0\r\n\r\n")
    else:
        answer = _ask(proxy, f"GET http://{authority}/ HTTP/1.1\r\nHost: {authority}\r\n\r\n")
    assert answer.startswith("HTTP/1.1 403 Forbidden\r\n"), answer
    assert answer.endswith(f"queryloop sandbox: {host.lower()} is not in sandbox.network.allowedDomains\n")
    assert origin.requests == []
    assert proxy.refused() == (host.lower(),)


def test_refused_hosts_are_listed_once_each_in_order_with_their_counts(proxy: DomainProxy) -> None:
    for host in ("b.example", "a.example", "b.example"):
        _ask(proxy, f"GET http://{host}/ HTTP/1.1\r\n\r\n")
    assert proxy.refused() == ("b.example", "a.example")
    assert proxy.refusal_counts() == {"b.example": 2, "a.example": 1}


def test_an_unreachable_allowed_origin_gets_502(proxy: DomainProxy) -> None:
    port = _unused_port()
    answer = _ask(proxy, f"GET http://localhost:{port}/ HTTP/1.1\r\n\r\n")
    assert answer.startswith("HTTP/1.1 502 Bad Gateway\r\n"), answer
    assert f"cannot reach localhost:{port}" in answer


@pytest.mark.parametrize(
    "request_head",
    [
        "nonsense\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",  # origin-form: the client does not know it talks to a proxy
        "GET ftp://localhost/ HTTP/1.1\r\n\r\n",
        "GET http://localhost:99999/ HTTP/1.1\r\n\r\n",
        "CONNECT localhost HTTP/1.1\r\n\r\n",
        "GET http://localhost/ HTTP/1.1\r\nno colon here\r\n\r\n",
    ],
)
def test_a_malformed_request_gets_400(proxy: DomainProxy, request_head: str) -> None:
    answer = _ask(proxy, request_head)
    assert answer.startswith("HTTP/1.1 400 Bad Request\r\n"), answer
    assert "queryloop sandbox: malformed proxy request" in answer


def test_start_is_idempotent_and_close_removes_the_socket(tmp_path: Path) -> None:
    proxy = DomainProxy(["localhost"], tmp_path / "p.sock")
    proxy.start()
    proxy.start()
    assert (tmp_path / "p.sock").is_socket()
    assert (tmp_path / "p.sock").stat().st_mode & 0o777 == 0o600
    proxy.close()
    proxy.close()
    assert not (tmp_path / "p.sock").exists()
    with pytest.raises(RuntimeError, match="was closed"):
        proxy.start()


def test_closing_the_proxy_ends_an_open_tunnel(tmp_path: Path, origin: _Origin) -> None:
    proxy = DomainProxy(["localhost"], tmp_path / "p.sock")
    proxy.start()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5)
        conn.connect(str(proxy.socket_path))
        conn.sendall(f"CONNECT localhost:{_port(origin)} HTTP/1.1\r\n\r\n".encode())
        assert conn.recv(100).startswith(b"HTTP/1.1 200")
        proxy.close()
        assert _read_to_end(conn) == b""
    assert not proxy.socket_path.exists()


def test_a_socket_path_too_long_for_unix_sockets_is_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="a Unix socket path must be at most 107"):
        DomainProxy([], tmp_path / ("d" * 120) / "p.sock")


# --- the bridge -------------------------------------------------------------------------------------------


def test_the_bridge_without_its_socket_warns_once_and_still_runs_the_command(tmp_path: Path) -> None:
    argv = bridge_argv(tmp_path / "missing.sock", BRIDGE_PORT, [sys.executable, "-c", "print('ran')"])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert (proc.returncode, proc.stdout) == (0, "ran\n")
    assert proc.stderr.startswith("queryloop sandbox: proxy socket ") and proc.stderr.count("\n") == 1


def test_the_bridge_with_a_malformed_command_line_runs_nothing_and_exits_125(tmp_path: Path) -> None:
    argv = [sys.executable, "-I", bridge_argv("s", 1, [])[3], "s", "notaport", "-", "--", "true"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 125
    assert "PORT must be a number" in proc.stderr


def _sandboxed(proxy: DomainProxy, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -c script args`` in bubblewrap with no network but the bridge to ``proxy``."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.fail("bubblewrap (bwrap) is not installed: these tests need it (tools/test.sh installs it)")
    sock_dir = str(proxy.socket_path.parent)
    proxy_url = f"http://127.0.0.1:{BRIDGE_PORT}"
    env_flags = [flag for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY") for flag in
                 ("--setenv", name, proxy_url)]  # fmt: skip
    argv = [
        bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--cap-drop", "ALL",
        "--die-with-parent", "--new-session", "--bind", sock_dir, sock_dir, *env_flags,
        "--unsetenv", "no_proxy", "--unsetenv", "NO_PROXY", "--",
        *bridge_argv(proxy.socket_path, BRIDGE_PORT, [sys.executable, "-I", "-c", script, *args]),
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    if proc.returncode != 0 and proc.stderr.startswith("bwrap:"):
        pytest.fail(f"bubblewrap could not start the sandbox (exit {proc.returncode}): {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert "queryloop sandbox:" not in proc.stderr, proc.stderr  # the bridge came up
    return proc


FETCH = """
import sys, urllib.error, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode(), end="")
except urllib.error.HTTPError as exc:
    print(exc.code, exc.read().decode(), end="")
"""

DIRECT = """
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()
    print("connected")
except OSError as exc:
    print("failed:", type(exc).__name__)
"""

TUNNEL = """
import socket, sys
with socket.create_connection(("127.0.0.1", 3128), timeout=5) as conn:
    conn.sendall(f"CONNECT {sys.argv[1]} HTTP/1.1\\r\\n\\r\\n".encode())
    head = b""
    while not head.endswith(b"\\r\\n\\r\\n"):
        head += conn.recv(1)
    conn.sendall(b"GET /tunnelled HTTP/1.0\\r\\n\\r\\n")
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
print(head.decode().split()[1], data.decode().split("\\r\\n\\r\\n", 1)[1], end="")
"""


def test_inside_bubblewrap_an_allowed_origin_answers_through_the_bridge(proxy: DomainProxy, origin: _Origin) -> None:
    proc = _sandboxed(proxy, FETCH, f"http://localhost:{_port(origin)}/inside")
    assert proc.stdout == GREETING
    assert [r[1] for r in origin.requests] == ["/inside"]


def test_inside_bubblewrap_a_connect_tunnel_through_the_bridge_reaches_an_allowed_origin(
    proxy: DomainProxy, origin: _Origin
) -> None:
    proc = _sandboxed(proxy, TUNNEL, f"localhost:{_port(origin)}")
    assert proc.stdout == "200 " + GREETING
    assert [r[1] for r in origin.requests] == ["/tunnelled"]


def test_inside_bubblewrap_a_direct_connection_to_the_origin_port_fails(proxy: DomainProxy, origin: _Origin) -> None:
    proc = _sandboxed(proxy, DIRECT, str(_port(origin)))
    assert proc.stdout == "failed: ConnectionRefusedError\n"
    assert origin.requests == []


def test_inside_bubblewrap_a_host_outside_the_allowed_domains_gets_403(proxy: DomainProxy, origin: _Origin) -> None:
    proc = _sandboxed(proxy, FETCH, f"http://127.0.0.1:{_port(origin)}/")
    assert proc.stdout == "403 queryloop sandbox: 127.0.0.1 is not in sandbox.network.allowedDomains\n"
    assert origin.requests == []
    assert proxy.refused() == ("127.0.0.1",)
