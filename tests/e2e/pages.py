"""A loopback HTTPS server of fixed pages for the web tools' tests: what WebFetch reads, and a log of what it asked.

The server's certificate is made for the test by the ``openssl`` command (for 127.0.0.1 and
localhost) and trusted by pointing ``SSL_CERT_FILE`` (Python) and ``NODE_EXTRA_CA_CERTS``
(Claude Code) at it: :meth:`PageServer.trust_env`. It listens on 127.0.0.1 only; nothing here
reaches another address. A page is ``(status, headers, body)``; ``PORT`` in a header or a
body is the server's port.
"""

from __future__ import annotations

import http.server
import shutil
import ssl
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import pytest

from .harness import HANG_GUARD_S

Page = tuple[int, Mapping[str, str], bytes]

# The run's model answering WebSearch's own request: the server tool's call, one hit, its text, the count.
SEARCH_REPLY: Mapping[str, object] = {
    "reply": {
        "content": [
            {
                "raw": {
                    "type": "server_tool_use",
                    "id": "srvtoolu_01a",
                    "name": "web_search",
                    "input": {"query": "pelican facts"},
                }
            },
            {
                "raw": {
                    "type": "web_search_tool_result",
                    "tool_use_id": "srvtoolu_01a",
                    "content": [
                        {
                            "type": "web_search_result",
                            "url": "https://birds.example/pelicans",
                            "title": "Pelicans",
                            "encrypted_content": "ENC",
                            "page_age": None,
                        }
                    ],
                }
            },
            {"text": "Pelicans have large bills."},
        ],
        "usage": {"server_tool_use": {"web_search_requests": 1}},
    }
}

HTML_PAGE: Page = (
    200,
    {"Content-Type": "text/html; charset=utf-8"},
    b"<html><head><title>T</title><script>var hidden = 'js-only';</script></head>"
    b"<body><h1>Hello</h1><p>The secret word is <b>pelican</b>.</p></body></html>",
)


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, and its key (skips when openssl is missing)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is not installed: the web tools' tests make their certificate with it")
    cert, key = folder / "cert.pem", folder / "key.pem"
    names = "subjectAltName=DNS:localhost,IP:127.0.0.1"
    args = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost"]
    subprocess.run(
        [openssl, *args, "-keyout", str(key), "-out", str(cert), "-addext", names],
        check=True,
        capture_output=True,
        timeout=HANG_GUARD_S,
    )
    return cert, key


class PageServer:
    """Serves ``pages`` by path over https (``tls``) or plain http on 127.0.0.1; ``seen`` lists the paths asked."""

    def __init__(self, folder: Path, pages: Mapping[str, Page], *, tls: bool = True) -> None:
        self.pages = dict(pages)
        self.seen: list[str] = []
        self.cert, key = make_certificate(folder) if tls else (folder / "none.pem", None)
        handler = self._handler()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.cert, key)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.seen.append(self.path)
                status, headers, body = server.pages.get(self.path, (404, {"Content-Type": "text/plain"}, b"none"))
                body = body.replace(b"PORT", str(server.port).encode())
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value.replace("PORT", str(server.port)))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return None

        return Handler

    def url(self, path: str, host: str = "127.0.0.1", scheme: str = "https") -> str:
        return f"{scheme}://{host}:{self.port}{path}"

    def trust_env(self) -> dict[str, str]:
        """The environment that makes both programs trust this server's certificate."""
        return {"SSL_CERT_FILE": str(self.cert), "NODE_EXTRA_CA_CERTS": str(self.cert)}

    def __enter__(self) -> PageServer:
        self.thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
