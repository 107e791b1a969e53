"""What a WebFetch URL is allowed to be: its parse, its host as the rules see it, the addresses it may reach.

Owns :func:`parse_web_url`, :func:`web_host` (the same parse, so the host a rule allows is the host fetched),
:func:`domain_matches` and :func:`address_problem`. Fetching is ``web``'s.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

import attrs

__all__ = [
    "MAX_URL_CHARS",
    "WebTarget",
    "WebUrlError",
    "address_problem",
    "domain_matches",
    "named_hosts",
    "parse_web_url",
    "web_host",
]

MAX_URL_CHARS: Final = 2000
"""The longest URL WebFetch takes (Claude Code refuses longer ones)."""

# Characters a URL parser may read differently from another (WHATWG reads ``\`` as ``/``, Python's does not):
# such a URL is refused, so the host the permission check saw is always the host connected to.
_AMBIGUOUS = re.compile(r"[\x00-\x20\x7f\\]")
_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?$")
_NUMBER = re.compile(r"^(?:0[xX][0-9a-fA-F]*|[0-9]+)$")


class WebUrlError(ValueError):
    """A URL WebFetch does not fetch; the message says why in one line."""


@attrs.frozen(kw_only=True)
class WebTarget:
    """A URL as WebFetch fetches it: ``https``, a canonical host, the port if one was given, the rest."""

    host: str  # lower case; an IPv4 address as a dotted quad
    port: int | None
    path: str  # the path and query, from "/"
    scheme: str  # as the model wrote it (http or https); what is fetched is always https

    @property
    def url(self) -> str:
        """The URL fetched (``https``)."""
        return self._with_scheme("https")

    @property
    def shown(self) -> str:
        """The URL as the model asked for it, in canonical form (its scheme kept)."""
        return self._with_scheme(self.scheme)

    def _with_scheme(self, scheme: str) -> str:
        port = f":{self.port}" if self.port is not None else ""
        return f"{scheme}://{self.host}{port}{self.path}"


def parse_web_url(url: str) -> WebTarget:
    """``url`` as WebFetch fetches it, or :class:`WebUrlError` saying why it is refused."""
    if len(url) > MAX_URL_CHARS:
        raise WebUrlError(f"the URL is {len(url)} characters long; at most {MAX_URL_CHARS} are accepted")
    if _AMBIGUOUS.search(url):
        raise WebUrlError("the URL contains a space, a control character or a backslash; write it plainly")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise WebUrlError(f"the URL cannot be read: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        shown = f"{scheme}:" if scheme else "none"
        raise WebUrlError(f"the URL's scheme is {shown}; only http and https URLs are fetched")
    if "@" in parts.netloc:
        raise WebUrlError("the URL carries a user name or password (an '@' before the host); those are not sent")
    host = canonical_host(parts.hostname or "")
    path = parts.path or "/"
    query = f"?{parts.query}" if parts.query else ""
    return WebTarget(host=host, port=port, path=path + query, scheme=scheme)


def canonical_host(raw: str) -> str:
    """``raw`` as the host fetched: lower case, IDNA-encoded, an IPv4 number in any spelling as a dotted quad.

    Refused: no host, an IPv6 literal, a host of one label (``localhost``), odd characters.
    """
    if not raw:
        raise WebUrlError("the URL has no host")
    if ":" in raw:
        raise WebUrlError("the URL's host is an IPv6 address; WebFetch takes host names and IPv4 addresses only")
    try:
        host = raw.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise WebUrlError(f"the host {raw!r} is not a valid domain name") from None
    # `evil.com.` is `evil.com`: without its final dot, or a deny rule naming the host would not match it
    host = host[:-1] if host.endswith(".") else host
    labels = host.split(".")
    if _NUMBER.match(labels[-1]):
        return _ipv4(host)
    if len(labels) < 2:
        raise WebUrlError(f"the host {host!r} has no dot; WebFetch fetches public host names (a.b)")
    if not all(_LABEL.match(label) for label in labels):
        raise WebUrlError(f"the host {host!r} is not a valid domain name")
    return host


def _ipv4(host: str) -> str:
    """A host whose last label is a number, read as URL parsers read it: ``2130706433``, ``0x7f.1``, ``127.1`` are
    all 127.0.0.1."""
    numbers = [_ipv4_number(label, host) for label in host.split(".")]
    if len(numbers) > 4 or any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        raise WebUrlError(f"the host {host!r} is not a valid IPv4 address")
    value = numbers[-1] + sum(n << (8 * (3 - i)) for i, n in enumerate(numbers[:-1]))
    return str(ipaddress.IPv4Address(value))


def _ipv4_number(label: str, host: str) -> int:
    try:
        if label[:2].lower() == "0x":
            return int(label[2:] or "0", 16)
        if len(label) > 1 and label.startswith("0"):
            return int(label[1:], 8)
        return int(label, 10)
    except ValueError:
        raise WebUrlError(f"the host {host!r} is not a valid IPv4 address") from None


def web_host(url: object) -> str | None:
    """The host a ``WebFetch(domain:…)`` rule is matched against; None when WebFetch would refuse the URL."""
    if not isinstance(url, str):
        return None
    try:
        return parse_web_url(url).host
    except WebUrlError:
        return None


def domain_matches(pattern: str, host: str) -> bool:
    """Whether a rule's ``domain:`` pattern covers ``host``: ``*`` every host, ``*.example.com`` the hosts under
    example.com (not example.com itself), anything else that host alone (case apart)."""
    pattern = pattern.strip().lower()
    if pattern == "*":
        return True
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    try:
        return canonical_host(pattern) == host
    except WebUrlError:
        return False


def named_hosts(specifiers: Iterable[str]) -> frozenset[str]:
    """The hosts ``WebFetch(domain:HOST)`` rules name one by one (no wildcard): only those may reach an address
    that is not on the public internet."""
    hosts = set()
    for specifier in specifiers:
        if specifier.startswith("domain:") and "*" not in specifier:
            try:
                hosts.add(canonical_host(specifier[len("domain:") :].strip()))
            except WebUrlError:
                continue
    return frozenset(hosts)


def address_problem(address: str) -> str | None:
    """Why ``address`` (an IP address as a resolver gives it) is not on the public internet, else None."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None:
            return address_problem(str(embedded))
    if ip.is_loopback:
        return "a loopback address (this machine)"
    if ip.is_link_local:
        return "a link-local address (where cloud metadata services answer)"
    if ip.is_private or ip.is_reserved or ip.is_unspecified or ip.is_multicast or not ip.is_global:
        return "a private or reserved address"
    return None
