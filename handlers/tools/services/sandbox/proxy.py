"""The sandbox's way out to the network: an HTTP proxy on a Unix socket that lets through only allowed domains.

Any other host gets ``403`` and is remembered for the run's report. It does not look inside a tunnel.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
import socket
import stat
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

__all__ = ["DomainProxy", "domain_allowed"]

_LABEL: Final = re.compile(r"^[a-z0-9_-]{1,63}$")  # one label of a host name (underscores occur in the wild)
_HEAD_LIMIT: Final = 64 * 1024  # a request head longer than this is refused as malformed
_HEAD_TIMEOUT: Final = 30.0  # seconds a client may take to send its request head
_CHUNK: Final = 64 * 1024
_MAX_UNIX_PATH: Final = 107  # sun_path holds 108 bytes, the last one NUL
# Headers for this connection only (RFC 9110 §7.6.1); the proxy opens its own connection to the origin.
# Transfer-Encoding stays: the body is relayed as the client framed it.
_HOP_BY_HOP: Final = frozenset({"connection", "proxy-connection", "keep-alive", "proxy-authorization", "te", "upgrade"})


class _BadRequest(Exception):
    """The client's request cannot be read as a proxy request (answered with 400)."""


def _split_authority(authority: str) -> tuple[str, str | None]:
    """``host[:port]`` split into host and port text, IPv6 brackets removed; a bare IPv6 address has no port."""
    if authority.startswith("["):
        host, bracket, rest = authority[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise _BadRequest(f"unbalanced brackets in {authority!r}")
        return host, rest[1:] if rest else None
    if authority.count(":") == 1:
        host, _, port = authority.partition(":")
        return host, port
    return authority, None


def _normalise(host: str) -> str:
    """Lower case, no surrounding space, no trailing root dot (``example.com.`` is ``example.com``)."""
    host = host.strip().lower()
    return host[:-1] if host.endswith(".") and not host.endswith("..") else host


def _address(host: str) -> bytes | None:
    """The packed address when ``host`` is an IP literal in any form the resolver accepts, else None.

    ``inet_aton`` is asked too because the resolver reads ``127.1``, ``0x7f.1`` and ``2130706433`` as
    addresses: such a host must count as an IP literal, never as a name a wildcard could cover.
    """
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        pass
    if not host.isascii() or not all(c.isalnum() or c == "." for c in host):
        return None
    try:
        return socket.inet_aton(host)
    except OSError:
        return None


def _is_host_name(host: str) -> bool:
    labels = host.split(".")
    return len(host) <= 253 and all(_LABEL.match(label) for label in labels)


def domain_allowed(host: str, allowed: Sequence[str]) -> bool:
    """Whether ``host`` (a name or IP literal, optionally ``:port`` or ``[v6]:port``) is covered by ``allowed``.

    ``allowed`` holds ``sandbox.network.allowedDomains`` entries: ``example.com`` matches that host
    only; ``*.example.com`` matches ``a.example.com`` and ``a.b.example.com`` but not ``example.com``;
    an IP literal matches only the same address listed as such. A lone ``*`` matches nothing. Anything
    that is neither a valid host name nor an address is refused, and so is every host when ``allowed``
    is empty.
    """
    if isinstance(allowed, str):
        raise TypeError(f"allowed must be a sequence of domain patterns, not the string {allowed!r}")
    try:
        name, port = _split_authority(host.strip())
    except _BadRequest:
        return False
    if port is not None and not (port.isascii() and port.isdigit()):
        return False
    name = _normalise(name)
    address = _address(name)
    if address is not None:
        return any(_address(_normalise(p).strip("[]")) == address for p in allowed)
    if not _is_host_name(name):
        return False
    for pattern in (_normalise(p) for p in allowed):
        if pattern.startswith("*."):
            if name.endswith(pattern[1:]) and len(name) > len(pattern) - 1:
                return True
        elif name == pattern:
            return True
    return False


def _response(status: str, body: str) -> bytes:
    data = body.encode("utf-8")
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + data


def _parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    """Method, target, version and headers of a request head (ending in a blank line)."""
    lines = head.decode("latin-1").split("\r\n")[:-2]
    parts = lines[0].split(" ") if lines else []
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequest(f"request line {lines[0][:200]!r} is not METHOD TARGET HTTP/1.x" if lines else "empty")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or line[0] in " \t":
            raise _BadRequest(f"header line {line[:200]!r} is not NAME: VALUE")
        headers.append((name, value.strip()))
    return parts[0], parts[1], parts[2], headers


def _connect_target(target: str) -> tuple[str, int]:
    host, port = _split_authority(target)
    if port is None or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise _BadRequest(f"CONNECT target {target[:200]!r} is not host:port")
    return _normalise(host), int(port)


def _forwarded_head(method: str, target: str, version: str, headers: list[tuple[str, str]]) -> tuple[str, int, bytes]:
    """Host, port and the origin-form request head for an absolute-URI request."""
    try:
        url = urlsplit(target)
        port = url.port or 80
    except ValueError as exc:
        raise _BadRequest(f"target {target[:200]!r}: {exc}") from None
    if url.scheme.lower() != "http" or not url.hostname:
        raise _BadRequest(f"target {target[:200]!r} is neither an http:// URI nor CONNECT host:port")
    host = _normalise(url.hostname)
    authority = (f"[{host}]" if ":" in host else host) + (f":{url.port}" if url.port else "")
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    dropped = _HOP_BY_HOP | {"host"}
    for name, value in headers:
        if name.lower() == "connection":
            dropped |= {token.strip().lower() for token in value.split(",")}
    lines = [f"{method} {path} {version}", f"Host: {authority}"]
    lines += [f"{name}: {value}" for name, value in headers if name.lower() not in dropped]
    lines.append("Connection: close")
    return host, port, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy bytes until end of stream, then pass the end on (a half-close), so tunnels can finish."""
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        pass


class DomainProxy:
    """An HTTP proxy on the Unix socket ``socket_path`` that reaches only ``allowed_domains`` (patterns as
    :func:`domain_allowed` reads them).

    ``start()`` binds the socket (owner-only) and returns once it accepts; calling it again does
    nothing. ``close()`` stops the loop, drops open connections and removes the socket; a closed proxy
    cannot be started again. Also a context manager.
    """

    def __init__(
        self, allowed_domains: Sequence[str], socket_path: str | os.PathLike[str], *, connect_timeout: float = 10.0
    ) -> None:
        if isinstance(allowed_domains, str):
            raise TypeError(f"allowed_domains must be a sequence of domain patterns, not {allowed_domains!r}")
        path = Path(socket_path).absolute()
        if len(os.fsencode(path)) > _MAX_UNIX_PATH:
            raise ValueError(
                f"proxy socket path {str(path)!r} is {len(os.fsencode(path))} bytes; a Unix socket path must be "
                f"at most {_MAX_UNIX_PATH}: choose a shorter directory"
            )
        self._path = path
        self._allowed = tuple(allowed_domains)
        self._connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._refused: dict[str, int] = {}  # host → refusals, in order of the first one
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._closed = False

    @property
    def socket_path(self) -> Path:
        return self._path

    @property
    def allowed_domains(self) -> tuple[str, ...]:
        return self._allowed

    def refused(self) -> tuple[str, ...]:
        """Every host refused so far (lower case, no port), once each, in the order first refused."""
        with self._lock:
            return tuple(self._refused)

    def refusal_counts(self) -> dict[str, int]:
        """How many requests each refused host had refused."""
        with self._lock:
            return dict(self._refused)

    def start(self) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the proxy on {self._path} was closed; make a new DomainProxy")
            if self._thread is not None:
                return
            ready = threading.Event()
            failure: list[BaseException] = []
            self._thread = threading.Thread(
                target=self._run, args=(ready, failure), name="queryloop-sandbox-proxy", daemon=True
            )
            self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            with self._lock:
                self._thread = None
            raise OSError(f"cannot serve the sandbox proxy on {self._path}: {failure[0]}") from failure[0]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread, loop, stop = self._thread, self._loop, self._stop
            self._thread = self._loop = self._stop = None
        if thread is None:
            return
        if loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop already ended
                pass
        thread.join(timeout=10)
        self._remove_socket()

    def __enter__(self) -> DomainProxy:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _remove_socket(self) -> None:
        try:
            if stat.S_ISSOCK(os.lstat(self._path).st_mode):
                os.unlink(self._path)
        except FileNotFoundError:
            pass

    def _run(self, ready: threading.Event, failure: list[BaseException]) -> None:
        try:
            asyncio.run(self._serve(ready))
        except BaseException as exc:  # reported by start(), which waits for ready
            if not ready.is_set():
                failure.append(exc)
        finally:
            ready.set()

    async def _serve(self, ready: threading.Event) -> None:
        stop = asyncio.Event()
        server = await asyncio.start_unix_server(self._handle, path=str(self._path), limit=_HEAD_LIMIT)
        os.chmod(self._path, 0o600)  # the sandbox runs as this user; nobody else may use the way out
        with self._lock:
            self._loop, self._stop = asyncio.get_running_loop(), stop
        ready.set()
        async with server:
            await stop.wait()
        # asyncio.run cancels the connections still open

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._answer(reader, writer)
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away or never finished its request
        finally:
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT)
            method, target, version, headers = _parse_head(head)
            if method.upper() == "CONNECT":
                host, port = _connect_target(target)
                request = b""
            else:
                host, port, request = _forwarded_head(method, target, version, headers)
        except asyncio.LimitOverrunError:
            return await self._reply(writer, "400 Bad Request", f"request head over {_HEAD_LIMIT} bytes")
        except _BadRequest as exc:
            return await self._reply(writer, "400 Bad Request", f"malformed proxy request: {exc}")
        if not domain_allowed(host, self._allowed):
            self._note_refused(host)
            return await self._reply(writer, "403 Forbidden", f"{host} is not in sandbox.network.allowedDomains")
        try:
            origin_reader, origin_writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, limit=_CHUNK), self._connect_timeout
            )
        except (OSError, TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
            return await self._reply(writer, "502 Bad Gateway", f"cannot reach {host}:{port}: {reason}")
        if request:
            origin_writer.write(request)
        else:
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        await self._relay(reader, writer, origin_reader, origin_writer, tunnel=not request)

    async def _relay(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        origin_reader: asyncio.StreamReader,
        origin_writer: asyncio.StreamWriter,
        *,
        tunnel: bool,
    ) -> None:
        """Bytes both ways. A tunnel lasts until both sides end; a forwarded request until the origin
        has sent its response and closed (it was asked to), whatever the client still holds open."""
        up = asyncio.create_task(_pump(reader, origin_writer))
        down = asyncio.create_task(_pump(origin_reader, writer))
        try:
            await (asyncio.gather(up, down) if tunnel else down)
        finally:
            up.cancel()
            down.cancel()
            await asyncio.gather(up, down, return_exceptions=True)
            origin_writer.close()

    async def _reply(self, writer: asyncio.StreamWriter, status: str, message: str) -> None:
        writer.write(_response(status, f"queryloop sandbox: {message}\n"))
        await writer.drain()

    def _note_refused(self, host: str) -> None:
        with self._lock:
            self._refused[host] = self._refused.get(host, 0) + 1
