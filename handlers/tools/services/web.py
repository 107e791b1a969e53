"""The WebFetch and WebSearch tools (Claude Code's names and input keys, our words).

Owns the two tools' specs, fetching a page (``https`` only, bounded in bytes and time), making it text, and reading
a search's answer. The URL checks are ``web_urls``'.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urljoin

import attrs

from .base import SearchAnswer, ToolContext, ToolError, ToolInputError, ToolOutput, ToolSpec, WebAccess
from .web_urls import WebTarget, WebUrlError, address_problem, parse_web_url

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "FETCH_TIMEOUT_S",
    "MAX_PAGE_BYTES",
    "MAX_PAGE_CHARS",
    "WEB_FETCH",
    "WEB_SEARCH",
    "page_text",
]

MAX_PAGE_BYTES: Final = 10 * 1024 * 1024
"""The largest response body read (Claude Code's limit too); a larger one is an error."""
MAX_PAGE_CHARS: Final = 100_000
"""The most characters of a page's text the model is sent (the rest is cut, and the cut is marked)."""
FETCH_TIMEOUT_S: Final = 60.0
"""The longest a fetch (every redirect included) may take."""
MAX_REDIRECTS: Final = 10
"""Redirects to the same host followed before giving up."""
SEARCH_MAX_USES: Final = 8
"""The searches one WebSearch call lets the server tool run (Claude Code's ``max_uses``)."""
WEB_SEARCH_TOOL: Final = "web_search_20250305"
"""The Messages API's web search server tool a WebSearch call's request carries."""

_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_TEXT_TYPES: Final = ("text/", "application/json", "application/xml", "application/javascript", "+json", "+xml")
_USER_AGENT: Final = "queryloop-webfetch/0.1"


# ---------------------------------------------------------------------------------- fetching


@attrs.frozen(kw_only=True)
class _Fetched:
    status: int
    reason: str
    content_type: str
    body: bytes
    redirect: str | None = None  # a Location on another host, not followed


class _CheckedResolver:
    """A resolver that hands aiohttp only the addresses a fetch may reach, so the address connected to is the one
    checked (a name cannot resolve to a public address for the check and a private one for the connection)."""

    def __init__(self, allow_private: bool) -> None:
        self.allow_private = allow_private
        self.refused: list[str] = []

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_UNSPEC) -> list[dict[str, Any]]:
        import asyncio

        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM, family=family)
        found = []
        for fam, _, proto, _, sockaddr in infos:
            address = str(sockaddr[0])
            problem = address_problem(address)
            if problem is not None and not self.allow_private:
                self.refused.append(f"{address} is {problem}")
                continue
            found.append({"hostname": host, "host": address, "port": port, "family": fam, "proto": proto, "flags": 0})
        if not found:
            raise OSError(f"{host} resolves to no address WebFetch may reach")
        return found

    async def close(self) -> None:
        return None


def _check_literal(target: WebTarget, allow_private: bool) -> None:
    """An IP address in the URL is not resolved (aiohttp connects to it as it is): checked here."""
    try:
        ipaddress.ip_address(target.host)
    except ValueError:
        return
    problem = address_problem(target.host)
    if problem is not None and not allow_private:
        raise ToolError(_private_refusal(target.host, problem))


def _private_refusal(host: str, problem: str) -> str:
    return (
        f"{host} is {problem}; WebFetch reaches such an address only for a host an allow rule names one by one "
        f"(WebFetch(domain:{host}))"
    )


async def _fetch(target: WebTarget, named: frozenset[str]) -> _Fetched:
    """GET ``target`` over https, following redirects on its host only."""
    import ssl

    import aiohttp

    allow_private = target.host in named
    _check_literal(target, allow_private)
    resolver = _CheckedResolver(allow_private)
    connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False, ssl=ssl.create_default_context())  # type: ignore[arg-type]
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
    headers = {"User-Agent": _USER_AGENT, "Accept": "text/markdown, text/html, */*"}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers, trust_env=False) as http:
        try:
            return await _follow(http, target)
        except aiohttp.ClientError as exc:
            if resolver.refused:
                raise ToolError(_private_refusal(target.host, "; ".join(resolver.refused))) from None
            raise ToolError(f"fetching {target.url} failed: {exc}") from None
        except TimeoutError:
            raise ToolError(f"fetching {target.url} took longer than {FETCH_TIMEOUT_S:g} s") from None


async def _follow(http: aiohttp.ClientSession, target: WebTarget) -> _Fetched:
    url = target.url
    for _ in range(MAX_REDIRECTS + 1):
        async with http.get(url, allow_redirects=False, max_line_size=16384, max_field_size=16384) as response:
            location = response.headers.get("Location")
            if response.status in _REDIRECTS and location:
                next_url = urljoin(url, location)
                try:
                    hop = parse_web_url(next_url)
                except WebUrlError:
                    hop = None
                if hop is None or hop.host != target.host:
                    return _Fetched(
                        status=response.status,
                        reason=response.reason or "",
                        content_type="",
                        body=b"",
                        redirect=next_url,
                    )
                url = hop.url
                continue
            return _Fetched(
                status=response.status,
                reason=response.reason or "",
                content_type=response.headers.get("Content-Type", ""),
                body=await _read_capped(response) if response.status < 400 else b"",
            )
    raise ToolError(f"{target.url} redirected more than {MAX_REDIRECTS} times")


async def _read_capped(response: aiohttp.ClientResponse) -> bytes:
    declared = response.content_length
    if declared is not None and declared > MAX_PAGE_BYTES:
        raise ToolError(_too_large(declared))
    body = bytearray()
    async for chunk in response.content.iter_chunked(65536):
        body += chunk
        if len(body) > MAX_PAGE_BYTES:
            raise ToolError(_too_large(None))
    return bytes(body)


def _too_large(size: int | None) -> str:
    what = f"{size} bytes" if size is not None else "more than that"
    return f"the page is larger than WebFetch reads ({MAX_PAGE_BYTES} bytes): it has {what}"


# ---------------------------------------------------------------------------------- converting


def _is_text(content_type: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    return not kind or any(kind.startswith(t) or kind.endswith(t) for t in _TEXT_TYPES)


def _charset(content_type: str) -> str:
    for part in content_type.split(";")[1:]:
        key, _, value = part.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return "utf-8"


def page_text(body: bytes, content_type: str) -> str | None:
    """A page's text for the model: HTML as Markdown, other text as it is; None for binary content."""
    if not _is_text(content_type):
        return None
    try:
        text = body.decode(_charset(content_type), errors="replace")
    except LookupError:  # a charset Python does not know
        text = body.decode("utf-8", errors="replace")
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind in ("text/html", "application/xhtml+xml") or (not kind and "<html" in text[:1024].lower()):
        text = _markdown(text)
    if len(text) > MAX_PAGE_CHARS:
        text = (
            text[:MAX_PAGE_CHARS] + f"\n\n[the page's text was cut here: {len(text) - MAX_PAGE_CHARS} more characters]"
        )
    return text


def _markdown(html: str) -> str:
    """HTML as Markdown, scripts and styles dropped (markdownify over BeautifulSoup's stdlib parser)."""
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(["script", "style", "noscript", "template", "iframe"]):
        tag.decompose()
    return str(MarkdownConverter().convert_soup(soup)).strip()


# ---------------------------------------------------------------------------------- WebFetch


def _question(target: WebTarget, text: str, prompt: str) -> str:
    return (
        f"Here is the content of {target.shown}, between the lines.\n---\n{text}\n---\n\n{prompt}\n\n"
        "Answer from that content alone, briefly. Quote only short passages, in quotation marks."
    )


async def _run_fetch(tool_input: Mapping[str, object], ctx: ToolContext) -> ToolOutput:
    started = time.monotonic()
    try:
        target = parse_web_url(str(tool_input["url"]))
    except WebUrlError as exc:
        raise ToolError(f"the URL is refused: {exc}") from None
    web = ctx.web
    fetched = await _fetch(target, web.named_hosts if web is not None else frozenset())
    result = await _answer(target, fetched, str(tool_input["prompt"]), web)
    response = {
        "bytes": len(fetched.body) if fetched.redirect is None else len(result.encode()),
        "code": fetched.status,
        "codeText": fetched.reason,
        "result": result,
        "durationMs": round((time.monotonic() - started) * 1000),
        "url": target.shown,
    }
    return ToolOutput(content=result, response=response)


async def _answer(target: WebTarget, fetched: _Fetched, prompt: str, web: WebAccess | None) -> str:
    if fetched.redirect is not None:
        return (
            f"{target.shown} answered {fetched.status} {fetched.reason}: a redirect to another host, which "
            f"WebFetch does not follow by itself.\nRedirect to (as the server said, unchecked): {fetched.redirect}\n"
            f"To read it, call WebFetch again with url {json.dumps(fetched.redirect)} and the same prompt."
        )
    if fetched.status >= 400:
        return (
            f"{target.shown} answered HTTP {fetched.status} {fetched.reason}; its body was not read. "
            "A page behind a login needs a tool that has the credentials."
        )
    text = page_text(fetched.body, fetched.content_type)
    if text is None:
        kind = fetched.content_type.split(";", 1)[0] or "unknown"
        return f"{target.shown} is binary content ({kind}, {len(fetched.body)} bytes); WebFetch reads text only."
    if web is None:  # no model to ask (a registry used without a run): the page's text itself
        return text
    answer = await web.ask_about_page(_question(target, text, prompt))
    return answer or "(the model gave no answer about the page)"


_FETCH_DESCRIPTION = """Fetch a web page and answer a question about it: the page is read over HTTPS (an http URL is \
upgraded), turned into Markdown, and a small model answers `prompt` from it; you get that answer.

- Give a full URL. A redirect to another host is not followed: you are told where it points, and may call again.
- Pages behind a login, or on a private network, usually fail; use a tool that has access for those.
- Large pages are cut; ask a precise question."""

WEB_FETCH: Final = ToolSpec(
    name="WebFetch",
    description=_FETCH_DESCRIPTION,
    input_schema={
        "type": "object",
        "properties": {
            "url": {"type": "string", "format": "uri", "description": "The URL to fetch"},
            "prompt": {"type": "string", "description": "What to find out from the page"},
        },
        "required": ["url", "prompt"],
        "additionalProperties": False,
    },
    concurrency_safe=True,
    read_only=True,
    idempotent=True,
    run=_run_fetch,
    own_timeout_s=lambda tool_input, ctx: FETCH_TIMEOUT_S + ctx.tool_timeout_s,  # the fetch, then the model's answer
)


# ---------------------------------------------------------------------------------- WebSearch


def _results(answer: SearchAnswer) -> list[object]:
    """The answer as Claude Code's ``results``: each search's hits (title and url), and the model's text."""
    results: list[object] = []
    for block in answer.content:
        if block.get("type") == "web_search_tool_result":
            hits = block.get("content")
            if isinstance(hits, list):
                found = [
                    {"title": str(h.get("title", "")), "url": str(h.get("url", ""))}
                    for h in hits
                    if isinstance(h, dict)
                ]
                results.append({"tool_use_id": str(block.get("tool_use_id", "")), "content": found})
            elif isinstance(hits, dict):
                results.append(f"The search failed: {hits.get('error_code', 'unknown error')}")
        elif block.get("type") == "text" and str(block.get("text", "")).strip():
            results.append(str(block["text"]))
    return results


def _search_text(query: str, results: Sequence[Any]) -> str:
    parts = [f"Web search results for {json.dumps(query)}:"]
    for item in results:
        if isinstance(item, dict):
            parts.append("Links: " + json.dumps(item["content"], ensure_ascii=False, separators=(",", ":")))
        else:
            parts.append(item)
    if len(parts) == 1:
        parts.append("No results were found.")
    parts.append("When you answer from these results, cite the pages you used as Markdown links.")
    return "\n\n".join(parts)


async def _run_search(tool_input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    started = time.monotonic()
    query = str(tool_input["query"])
    allowed = [str(d) for d in tool_input.get("allowed_domains") or ()]
    blocked = [str(d) for d in tool_input.get("blocked_domains") or ()]
    if allowed and blocked:
        raise ToolInputError("give allowed_domains or blocked_domains, not both: the search takes one list")
    if ctx.web is None:
        raise ToolError("WebSearch needs the run's model service, which this context does not have")
    answer = await ctx.web.search(query, allowed, blocked)
    results = _results(answer)
    response = {
        "query": query,
        "results": results,
        "durationSeconds": time.monotonic() - started,
        "searchCount": answer.searches,
    }
    return ToolOutput(content=_search_text(query, results), response=response)


_SEARCH_DESCRIPTION = """Search the web. Returns the result pages (title and URL) and a short summary of what \
they say.

- `allowed_domains` keeps only results from those domains; `blocked_domains` drops results from them (one or the \
other, not both).
- Answer from the results and list the pages you used as Markdown links."""

WEB_SEARCH: Final = ToolSpec(
    name="WebSearch",
    description=_SEARCH_DESCRIPTION,
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 2, "description": "What to search for"},
            "allowed_domains": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Only results from these domains",
            },
            "blocked_domains": {
                "type": "array",
                "items": {"type": "string"},
                "description": "No results from these domains",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    concurrency_safe=True,
    read_only=True,
    idempotent=True,
    run=_run_search,
)


def search_tool_definition(allowed: Sequence[str], blocked: Sequence[str]) -> dict[str, object]:
    """The server tool a WebSearch request carries, with the call's domain list."""
    definition: dict[str, object] = {"type": WEB_SEARCH_TOOL, "name": "web_search"}
    if allowed:
        definition["allowed_domains"] = list(allowed)
    if blocked:
        definition["blocked_domains"] = list(blocked)
    definition["max_uses"] = SEARCH_MAX_USES
    return definition
