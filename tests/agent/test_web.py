"""WebFetch and WebSearch: the URL and address checks against a hostile model, the rules, and the tools on a real
loopback HTTPS server (the model they ask is scripted in-process)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from e2e.pages import HTML_PAGE, PageServer

from queryloop.handlers.tools import PermissionRules, ToolContext, ToolError
from queryloop.handlers.tools.services import web
from queryloop.handlers.tools.services.base import SearchAnswer, ToolInputError, ToolOutput
from queryloop.handlers.tools.services.permissions import decide, suggest_rules
from queryloop.handlers.tools.services.web import WEB_FETCH, WEB_SEARCH, page_text
from queryloop.handlers.tools.services.web_urls import (
    WebUrlError,
    address_problem,
    domain_matches,
    named_hosts,
    parse_web_url,
    web_host,
)

# ----------------------------------------------------------------------------- the URL a model may give


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("file:///etc/passwd", "scheme is file:"),
        ("ftp://example.com/x", "scheme is ftp:"),
        ("javascript:alert(1)", "scheme is javascript:"),
        ("data:text/html,<b>x</b>", "scheme is data:"),
        ("gopher://example.com:70/", "scheme is gopher:"),
        ("//example.com/x", "scheme is none"),
        ("https://user:pw@example.com/", "user name or password"),
        ("https://allowed.com@evil.com/", "user name or password"),
        ("https://allowed.com:443@169.254.169.254/", "user name or password"),
        ("https://127.0.0.1:8\\@allowed.com/", "backslash"),
        ("https://allowed.com\\.evil.com/", "backslash"),
        ("https://exa mple.com/", "space"),
        ("https://example.com/\nHost: evil.com", "control character"),
        ("https://example.com\x00.evil.com/", "control character"),
        ("https://[::1]/", "IPv6"),
        ("https://[::ffff:169.254.169.254]/", "IPv6"),
        ("https://[fe80::1%25eth0]/", "IPv6"),
        ("https://localhost/", "no dot"),
        ("https://localhost./", "no dot"),
        ("https://a.com../", "not a valid domain"),
        ("https://metadata/computeMetadata/v1/", "no dot"),
        ("https:///etc/passwd", "no host"),
        ("https://a..b/", "not a valid domain"),
        ("https://exa%6dple.com/", "not a valid domain"),
        ("https://256.1.1.1/", "not a valid IPv4"),
        ("https://1.2.3.4.5/", "not a valid IPv4"),
        ("https://0x1g.1/", "not a valid IPv4"),
        ("https://example.com:99999/", "cannot be read"),
        ("https://example.com/" + "a" * 2000, "at most 2000"),
    ],
)
def test_a_url_webfetch_does_not_fetch_is_refused_with_the_reason(url: str, why: str) -> None:
    with pytest.raises(WebUrlError, match=why):
        parse_web_url(url)
    assert web_host(url) is None  # and no rule can match it


@pytest.mark.parametrize(
    ("url", "host", "fetched"),
    [
        ("http://example.com/a?b=1#frag", "example.com", "https://example.com/a?b=1"),
        ("https://EXAMPLE.com", "example.com", "https://example.com/"),
        ("https://example.com:8443/x", "example.com", "https://example.com:8443/x"),
        ("https://Example.COM./x", "example.com", "https://example.com/x"),
        ("https://127.0.0.1./x", "127.0.0.1", "https://127.0.0.1/x"),
        ("https://bücher.example/", "xn--bcher-kva.example", "https://xn--bcher-kva.example/"),
        ("https://2130706433/", "127.0.0.1", "https://127.0.0.1/"),
        ("https://0x7f000001/", "127.0.0.1", "https://127.0.0.1/"),
        ("https://127.1/", "127.0.0.1", "https://127.0.0.1/"),
        ("https://0x7f.0.0.1/", "127.0.0.1", "https://127.0.0.1/"),
        ("https://0251.0376.0251.0376/", "169.254.169.254", "https://169.254.169.254/"),
        ("https://2852039166/latest/meta-data/", "169.254.169.254", "https://169.254.169.254/latest/meta-data/"),
        ("https://example.com/?next=@evil.com", "example.com", "https://example.com/?next=@evil.com"),
    ],
)
def test_a_url_is_read_once_http_upgraded_and_every_ipv4_spelling_made_a_dotted_quad(
    url: str, host: str, fetched: str
) -> None:
    target = parse_web_url(url)
    assert (target.host, target.url) == (host, fetched)
    assert web_host(url) == host


def test_the_url_reported_keeps_the_scheme_the_model_wrote() -> None:
    assert parse_web_url("http://2130706433:80/p").shown == "http://127.0.0.1:80/p"


@pytest.mark.parametrize(
    ("pattern", "host", "matches"),
    [
        ("example.com", "example.com", True),
        ("EXAMPLE.com", "example.com", True),
        ("example.com", "www.example.com", False),
        ("example.com", "example.com.evil.net", False),
        ("*.example.com", "docs.example.com", True),
        ("*.example.com", "a.b.example.com", True),
        ("*.example.com", "example.com", False),
        ("*.example.com", "badexample.com", False),
        ("*", "anything.at.all", True),
        ("127.0.0.1", "127.0.0.1", True),
        ("2130706433", "127.0.0.1", True),  # the rule read as the URL is
        ("127.0.0.1:8080", "127.0.0.1", False),  # a port is no part of a domain rule
    ],
)
def test_a_domain_rule_covers_its_host_its_subdomains_with_a_star_or_every_host(
    pattern: str, host: str, matches: bool
) -> None:
    assert domain_matches(pattern, host) is matches


def test_only_hosts_a_rule_names_one_by_one_may_reach_private_addresses() -> None:
    rules = ["domain:127.0.0.1", "domain:*.corp.example", "domain:*", "domain:Intranet.Example", "github.com"]
    assert named_hosts(rules) == {"127.0.0.1", "intranet.example"}


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.9.9.9", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("::ffff:169.254.169.254", "link-local"),  # an IPv4 address inside an IPv6 one
        ("::ffff:127.0.0.1", "loopback"),
        ("2002:a9fe:a9fe::1", "link-local"),  # 6to4 of 169.254.169.254
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "private"),  # carrier-grade NAT
        ("fd00:ec2::254", "private"),  # a cloud's IPv6 metadata address
        ("0.0.0.0", "private"),
        ("::", "private"),
        ("224.0.0.1", "private"),
        ("255.255.255.255", "private"),
        ("8.8.8.8", None),
        ("2606:4700:4700::1111", None),
    ],
)
def test_an_address_off_the_public_internet_is_named_for_what_it_is(address: str, kind: str | None) -> None:
    problem = address_problem(address)
    assert (problem is None) if kind is None else (problem is not None and kind in problem)


# ----------------------------------------------------------------------------- permission rules


def _decide(url: str, *, allow: Sequence[str] = (), deny: Sequence[str] = (), tmp_path: Path) -> str:
    rules = PermissionRules(allow=list(allow), deny=list(deny))
    tool_input = {"url": url, "prompt": "p"}
    return decide("WebFetch", tool_input, mode="default", rules=rules, cwd=tmp_path, interactive=False).behavior


@pytest.mark.parametrize(
    ("url", "behavior"),
    [
        ("https://allowed.com/page", "allow"),
        ("http://ALLOWED.com/page", "allow"),
        ("https://allowed.com@evil.com/", "deny"),  # the host is evil.com, and such a URL is refused anyway
        ("https://evil.com/?u=https://allowed.com/", "deny"),
        ("https://allowed.com.evil.com/", "deny"),
        ("https://evil.com\\@allowed.com/", "deny"),
        ("https://evil.com#@allowed.com", "deny"),
        ("file://allowed.com/etc/passwd", "deny"),
    ],
)
def test_a_domain_allow_rule_lets_through_that_host_only_and_a_headless_run_denies_the_rest(
    url: str, behavior: str, tmp_path: Path
) -> None:
    assert _decide(url, allow=["WebFetch(domain:allowed.com)"], tmp_path=tmp_path) == behavior


def test_without_a_rule_a_headless_webfetch_or_websearch_is_denied(tmp_path: Path) -> None:
    assert _decide("https://example.com/", tmp_path=tmp_path) == "deny"
    rules = PermissionRules()
    search = decide("WebSearch", {"query": "q q"}, mode="default", rules=rules, cwd=tmp_path, interactive=False)
    assert search.behavior == "deny"


def test_a_domain_deny_rule_beats_a_bare_allow_and_covers_subdomains_with_a_star(tmp_path: Path) -> None:
    deny = ["WebFetch(domain:*.evil.com)", "WebFetch(domain:evil.com)"]
    assert _decide("https://a.evil.com/", allow=["WebFetch"], deny=deny, tmp_path=tmp_path) == "deny"
    assert _decide("https://evil.com/", allow=["WebFetch"], deny=deny, tmp_path=tmp_path) == "deny"
    assert _decide("https://EVIL.com./", allow=["WebFetch"], deny=deny, tmp_path=tmp_path) == "deny"  # a final dot
    assert _decide("https://a.evil.com./", allow=["WebFetch"], deny=deny, tmp_path=tmp_path) == "deny"
    assert _decide("https://good.com/", allow=["WebFetch"], deny=deny, tmp_path=tmp_path) == "allow"


def test_an_always_answer_to_webfetch_allows_the_host_not_every_url(tmp_path: Path) -> None:
    assert suggest_rules("WebFetch", {"url": "http://Docs.Example.com/a"}, cwd=tmp_path) == (
        "WebFetch(domain:docs.example.com)",
    )
    assert suggest_rules("WebFetch", {"url": "file:///etc/passwd"}, cwd=tmp_path) == ()


# ----------------------------------------------------------------------------- the tools, on a loopback server


class ScriptedWeb:
    """The run's side of the web tools, scripted: records each question and search, answers with ``answer``."""

    def __init__(self, named: frozenset[str] = frozenset(), answer: str = "the word is pelican") -> None:
        self.named_hosts = named
        self.answer = answer
        self.questions: list[str] = []
        self.searches: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []

    async def ask_about_page(self, text: str) -> str:
        self.questions.append(text)
        return self.answer

    async def search(self, query: str, allowed: Sequence[str], blocked: Sequence[str]) -> SearchAnswer:
        self.searches.append((query, tuple(allowed), tuple(blocked)))
        hits = [
            {"type": "web_search_result", "url": "https://e.example/p", "title": "Pelicans", "encrypted_content": "E"}
        ]
        content = (
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": query}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": hits},
            {"type": "text", "text": "Pelicans have large bills."},
        )
        return SearchAnswer(content=content, searches=1)


PAGES: Mapping[str, Any] = {
    "/page": HTML_PAGE,
    "/text": (200, {"Content-Type": "text/plain"}, b"plain pelican"),
    "/png": (200, {"Content-Type": "image/png"}, b"\x89PNG\r\n\x1a\n"),
    "/same": (302, {"Location": "/page"}, b""),
    "/http-same": (301, {"Location": "http://127.0.0.1:PORT/page"}, b""),
    "/other": (302, {"Location": "https://localhost:PORT/page"}, b""),
    "/to-metadata": (302, {"Location": "https://169.254.169.254/latest/"}, b""),
    "/loop": (302, {"Location": "/loop"}, b""),
    "/gone": (404, {"Content-Type": "text/html"}, b"<p>secret body</p>"),
    "/big": (200, {"Content-Type": "text/plain"}, b"x" * 5000),
}


@pytest.fixture
def pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PageServer:
    with PageServer(tmp_path, PAGES) as server:
        monkeypatch.setenv("SSL_CERT_FILE", str(server.cert))
        yield server  # type: ignore[misc]


def _fetch(url: str, scripted: ScriptedWeb, tmp_path: Path) -> ToolOutput:
    ctx = ToolContext(cwd=tmp_path, web=scripted)
    return asyncio.run(WEB_FETCH.run({"url": url, "prompt": "What is the secret word?"}, ctx))


def test_a_page_is_fetched_over_https_as_markdown_and_the_small_models_answer_is_the_result(
    pages: PageServer, tmp_path: Path
) -> None:
    scripted = ScriptedWeb(named=frozenset({"127.0.0.1"}))
    out = _fetch(pages.url("/page"), scripted, tmp_path)
    assert (out.content, out.is_error) == ("the word is pelican", False)
    [question] = scripted.questions
    assert "**pelican**" in question and "What is the secret word?" in question
    assert "js-only" not in question and "<p>" not in question  # scripts dropped, tags gone
    assert {k: out.response[k] for k in ("code", "codeText", "url", "result")} == {
        "code": 200,
        "codeText": "OK",
        "url": pages.url("/page"),
        "result": "the word is pelican",
    }
    assert out.response["bytes"] == len(HTML_PAGE[2])


def test_an_http_url_is_fetched_over_https(pages: PageServer, tmp_path: Path) -> None:
    out = _fetch(pages.url("/text", scheme="http"), ScriptedWeb(named=frozenset({"127.0.0.1"})), tmp_path)
    assert out.content == "the word is pelican" and pages.seen == ["/text"]  # the server speaks TLS only


def test_a_redirect_on_the_same_host_is_followed_and_one_to_another_host_is_told_not_followed(
    pages: PageServer, tmp_path: Path
) -> None:
    scripted = ScriptedWeb(named=frozenset({"127.0.0.1"}))
    assert _fetch(pages.url("/same"), scripted, tmp_path).content == "the word is pelican"
    assert _fetch(pages.url("/http-same"), scripted, tmp_path).content == "the word is pelican"
    out = _fetch(pages.url("/other"), scripted, tmp_path)
    assert not out.is_error and f"https://localhost:{pages.port}/page" in str(out.content)
    assert out.response["code"] == 302
    assert pages.seen == ["/same", "/page", "/http-same", "/page", "/other"]  # localhost was never asked
    assert len(scripted.questions) == 2


def test_a_redirect_to_the_metadata_address_is_never_followed(pages: PageServer, tmp_path: Path) -> None:
    out = _fetch(pages.url("/to-metadata"), ScriptedWeb(named=frozenset({"127.0.0.1"})), tmp_path)
    assert "https://169.254.169.254/latest/" in str(out.content) and "does not follow" in str(out.content)


def test_a_redirect_loop_on_one_host_ends_with_an_error(pages: PageServer, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="redirected more than 10 times"):
        _fetch(pages.url("/loop"), ScriptedWeb(named=frozenset({"127.0.0.1"})), tmp_path)


def test_loopback_is_reached_only_for_a_host_a_rule_names(pages: PageServer, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"127\.0\.0\.1 is a loopback address .*\(WebFetch\(domain:127\.0\.0\.1\)\)"):
        _fetch(pages.url("/page"), ScriptedWeb(), tmp_path)
    with pytest.raises(ToolError, match="loopback"):
        _fetch(f"https://2130706433:{pages.port}/page", ScriptedWeb(), tmp_path)
    assert pages.seen == []


def test_a_name_that_resolves_to_loopback_gives_the_connection_no_address_unless_a_rule_names_it() -> None:
    """The resolver WebFetch's connections use (a real lookup of ``localhost``) drops what is off the public
    internet, so a name cannot pass a check with one address and connect to another."""
    refusing = web._CheckedResolver(allow_private=False)
    with pytest.raises(OSError, match="no address WebFetch may reach"):
        asyncio.run(refusing.resolve("localhost", 443))
    assert any("127.0.0.1 is a loopback address" in r for r in refusing.refused)
    named = asyncio.run(web._CheckedResolver(allow_private=True).resolve("localhost", 443))
    assert "127.0.0.1" in {a["host"] for a in named} and {a["hostname"] for a in named} == {"localhost"}


@pytest.mark.parametrize(
    "url",
    ["https://169.254.169.254/latest/meta-data/", "https://2852039166/", "https://0xa9fea9fe/", "https://10.0.0.1/"],
)
def test_a_metadata_or_private_address_is_refused_without_a_connection(url: str, tmp_path: Path) -> None:
    """Refused from the URL alone: no socket is opened (the error names the rule that would allow it)."""
    with pytest.raises(ToolError, match=r"WebFetch reaches such an address only for a host an allow rule names"):
        _fetch(url, ScriptedWeb(named=frozenset({"127.0.0.1"})), tmp_path)


def test_a_refused_url_is_an_error_before_anything_is_fetched(pages: PageServer, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="user name or password"):
        _fetch(f"https://127.0.0.1@127.0.0.1:{pages.port}/page", ScriptedWeb(named=frozenset({"127.0.0.1"})), tmp_path)
    assert pages.seen == []


def test_an_error_status_is_reported_without_its_body(pages: PageServer, tmp_path: Path) -> None:
    scripted = ScriptedWeb(named=frozenset({"127.0.0.1"}))
    out = _fetch(pages.url("/gone"), scripted, tmp_path)
    assert not out.is_error and "404" in str(out.content) and "secret body" not in str(out.content)
    assert (out.response["code"], out.response["bytes"], scripted.questions) == (404, 0, [])


def test_binary_content_is_not_sent_to_the_model(pages: PageServer, tmp_path: Path) -> None:
    scripted = ScriptedWeb(named=frozenset({"127.0.0.1"}))
    out = _fetch(pages.url("/png"), scripted, tmp_path)
    assert "binary content (image/png, 8 bytes)" in str(out.content) and scripted.questions == []


def test_a_page_larger_than_the_cap_is_an_error(
    pages: PageServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web, "MAX_PAGE_BYTES", 4000)
    with pytest.raises(ToolError, match="larger than WebFetch reads"):
        _fetch(pages.url("/big"), ScriptedWeb(named=frozenset({"127.0.0.1"})), tmp_path)


def test_a_long_page_is_cut_and_the_cut_is_marked() -> None:
    text = page_text(b"y" * (web.MAX_PAGE_CHARS + 10), "text/plain")
    assert text is not None and text.startswith("y" * web.MAX_PAGE_CHARS) and "10 more characters" in text


def test_a_page_in_another_charset_or_an_unknown_one_is_still_read() -> None:
    assert page_text("café".encode("latin-1"), "text/plain; charset=ISO-8859-1") == "café"
    assert page_text(b"plain", "text/plain; charset=no-such-charset") == "plain"


# ----------------------------------------------------------------------------- WebSearch


def test_websearch_sends_its_query_and_domains_and_lists_the_hits_as_links(tmp_path: Path) -> None:
    scripted = ScriptedWeb()
    ctx = ToolContext(cwd=tmp_path, web=scripted)
    out = asyncio.run(WEB_SEARCH.run({"query": "pelican facts", "allowed_domains": ["e.example"]}, ctx))
    assert scripted.searches == [("pelican facts", ("e.example",), ())]
    assert 'Links: [{"title":"Pelicans","url":"https://e.example/p"}]' in str(out.content)
    assert "Pelicans have large bills." in str(out.content)
    assert out.response["results"] == [
        {"tool_use_id": "srvtoolu_1", "content": [{"title": "Pelicans", "url": "https://e.example/p"}]},
        "Pelicans have large bills.",
    ]
    assert (out.response["query"], out.response["searchCount"]) == ("pelican facts", 1)


def test_websearch_refuses_both_domain_lists_before_searching(tmp_path: Path) -> None:
    scripted = ScriptedWeb()
    ctx = ToolContext(cwd=tmp_path, web=scripted)
    tool_input = {"query": "q q", "allowed_domains": ["a.example"], "blocked_domains": ["b.example"]}
    with pytest.raises(ToolInputError, match="not both"):
        asyncio.run(WEB_SEARCH.run(tool_input, ctx))
    assert scripted.searches == []


def test_the_search_server_tool_carries_the_calls_domain_list() -> None:
    assert web.search_tool_definition(["a.example"], []) == {
        "type": "web_search_20250305",
        "name": "web_search",
        "allowed_domains": ["a.example"],
        "max_uses": 8,
    }


def test_a_microcompaction_clears_old_web_results_as_it_clears_old_reads() -> None:
    from queryloop.handlers.context.services.compaction import plan_clearing
    from queryloop.handlers.messages import MessageView

    messages = [{"role": "user", "content": "go"}]
    for i, name in enumerate(["WebFetch", "WebSearch", "WebFetch", "Read", "Read", "Read", "Read"]):
        call = {"type": "tool_use", "id": f"t{i}", "name": name, "input": {}}
        messages.append({"role": "assistant", "content": [call]})
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": "page text " * 50}
        messages.append({"role": "user", "content": [result]})
    assert plan_clearing(MessageView.of(messages), keep_recent=4).tool_use_ids == {"t0", "t1", "t2"}
