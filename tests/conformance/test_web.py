"""WebFetch and WebSearch beside Claude Code 2.1.235: what each program offers, fetches, asks and answers.

Each probe runs in both against the embedded server and a loopback HTTPS page server the test
starts (its certificate trusted through ``SSL_CERT_FILE`` and ``NODE_EXTRA_CA_CERTS``). Claude
Code asks a claude.ai service whether a domain may be fetched before it fetches; offline that
check fails, so every probe sets ``skipWebFetchPreflight`` (queryloop has no such check). The
view of a run: the calls refused, the paths the page server was asked for, whether the tool's
result is an error and says what the row expects, and the requests besides the loop's (model,
server tools, streamed, ``max_tokens``). By design, queryloop reaches a loopback or private address only for a host an
allow rule names one by one (docs/security.md, "Web tools").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from e2e.pages import HTML_PAGE, SEARCH_REPLY, PageServer

from .reference import Observed, Probe, Row, observe

pytestmark = pytest.mark.slow  # two programs per probe

SMALL = "mock-small"
ANSWER = "ANSWER-FROM-THE-SMALL-MODEL"
DESIGN = (
    "queryloop reaches a loopback or private address only for a host an allow rule names "
    "([details](security.md#web-tools))"
)

PAGES = {
    "/page": HTML_PAGE,
    "/other": (302, {"Location": "https://localhost:PORT/page"}, b""),
    "/gone": (404, {"Content-Type": "text/html"}, b"<p>gone</p>"),
    "/big": (200, {"Content-Type": "text/plain"}, b"x" * (11 * 1024 * 1024)),
}

DONE = {"reply": {"content": [{"text": "done"}]}}


@attrs.frozen(kw_only=True)
class WebProbe:
    """One call (its input may hold ``URL(path)`` placeholders), the rules, what the result should say."""

    tool: str = "WebFetch"
    tool_input: dict[str, Any] = attrs.field(factory=dict)
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    says: str = ANSWER  # a text the tool's result holds (PORT: the page server's port)
    search: bool = False  # the scenario answers a search request

    def probe(self, server: PageServer) -> Probe:
        tool_input = json.loads(json.dumps(self.tool_input).replace("PORT", str(server.port)))
        steps = [{"reply": {"content": [{"tool_use": {"name": self.tool, "input": tool_input}}]}}]
        steps += [SEARCH_REPLY, DONE] if self.search else [DONE]
        models = {"mock-primary": steps, SMALL: [{"reply": {"content": [{"text": ANSWER}]}}]}
        scenario = {"schema_version": 1, "scenario": "web", "model": "mock-primary", "models": models}
        settings = {"skipWebFetchPreflight": True, "permissions": {"allow": list(self.allow), "deny": list(self.deny)}}
        return Probe(
            calls=(),
            scenario=json.dumps(scenario),
            args=("--settings", json.dumps(settings)),
            env={"ANTHROPIC_SMALL_FAST_MODEL": SMALL, **server.trust_env()},
        )


def _url(path: str, host: str = "127.0.0.1", scheme: str = "https") -> str:
    return f"{scheme}://{host}:PORT{path}"


def _fetch(url: str, *allow: str, deny: tuple[str, ...] = (), says: str = ANSWER) -> WebProbe:
    return WebProbe(tool_input={"url": url, "prompt": "What is the secret word?"}, allow=allow, deny=deny, says=says)


NAMED = "WebFetch(domain:127.0.0.1)"
MARK_TOOLS = ("WebFetch", "WebSearch")

ROWS: dict[str, tuple[WebProbe, Row]] = {}


def _row(name: str, web: WebProbe, queryloop: dict[str, object], **differs: Any) -> None:
    # the Row's probe is made per run from ``web`` (the page server's port is known only then)
    ROWS[name] = (web, Row(probe=Probe(calls=()), queryloop=queryloop, **differs))


_row("WebFetch without a rule", _fetch(_url("/page")), {"denied": ("WebFetch",), "fetched": (), "side": ()})
_row(
    "WebFetch under a domain rule",
    _fetch(_url("/page"), NAMED),
    {"denied": (), "fetched": ("/page",), "error": False, "says": True, "side": ((SMALL, (), True, 32000),)},
)
_row("an http URL is fetched over https", _fetch(_url("/page", scheme="http"), NAMED), {"fetched": ("/page",)})
_row(
    "an IPv4 number under a rule naming its dotted quad",
    _fetch("https://2130706433:PORT/page", NAMED),
    {"fetched": ("/page",)},
)
_row(
    "a deny rule beats a bare allow",
    _fetch(_url("/page"), "WebFetch", deny=(NAMED,)),
    {"fetched": (), "error": True, "side": ()},
)
_row(
    "a final dot does not escape a deny rule",
    _fetch("https://127.0.0.1.:PORT/page", "WebFetch", deny=(NAMED,)),
    {"fetched": (), "error": True, "side": ()},
)
_row(
    "a redirect to another host",
    _fetch(_url("/other"), NAMED, says="https://localhost:PORT/page"),
    {"fetched": ("/other",), "error": False, "says": True, "side": ()},
)
_row("a URL with a user name", _fetch("https://me:pw@127.0.0.1:PORT/page", "WebFetch"), {"fetched": (), "error": True})
_row("a host of one label", _fetch(_url("/page", host="localhost"), "WebFetch"), {"fetched": (), "error": True})
_row(
    "an error status",
    _fetch(_url("/gone"), NAMED, says="404"),
    {"fetched": ("/gone",), "error": False, "says": True, "side": ()},
)
_row("a page over 10 MB", _fetch(_url("/big"), NAMED), {"fetched": ("/big",), "error": True, "side": ()})
_row(
    "a bare allow rule and loopback",
    _fetch(_url("/page"), "WebFetch"),
    {"fetched": (), "error": True, "side": ()},
    reference={"fetched": ("/page",), "error": False, "side": ((SMALL, (), True, 32000),)},
    design=DESIGN,
)
_row(
    "WebSearch without a rule",
    WebProbe(tool="WebSearch", tool_input={"query": "pelican facts"}),
    {"denied": ("WebSearch",), "side": ()},
)
_row(
    "WebSearch under its rule",
    WebProbe(
        tool="WebSearch",
        tool_input={"query": "pelican facts", "allowed_domains": ["birds.example"]},
        allow=("WebSearch",),
        says='"url":"https://birds.example/pelicans"',
        search=True,
    ),
    {
        "denied": (),
        "error": False,
        "says": True,
        "side": (("mock-primary", ("web_search_20250305",), True, 32000),),
        "searches": 1,
    },
)
_row(
    "WebSearch with both domain lists",
    WebProbe(
        tool="WebSearch",
        tool_input={"query": "pelican facts", "allowed_domains": ["a.example"], "blocked_domains": ["b.example"]},
        allow=("WebSearch",),
        says="<tool_use_error>",
    ),
    {"error": True, "says": True, "side": ()},
)


def _result_block(observed: Observed) -> dict[str, Any]:
    """The first tool result the run reported (its stream-json user line)."""
    for line in observed.lines:
        content = line.get("message", {}).get("content") if line.get("type") == "user" else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "tool_result":
                return block
    return {}


def _text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return str(content or "")


VIEW: dict[str, Callable[[Observed, PageServer, WebProbe], object]] = {
    "denied": lambda o, s, w: o.denied,
    "fetched": lambda o, s, w: tuple(s.seen),
    "error": lambda o, s, w: bool(_result_block(o).get("is_error", False)),
    "says": lambda o, s, w: w.says.replace("PORT", str(s.port)) in _text(_result_block(o)),
    "side": lambda o, s, w: tuple(
        (r.model, tuple(str(t.get("type", t.get("name"))) for t in r.tool_definitions), r.stream, r.max_tokens)
        for r in o.requests
        if not any(t in r.tools for t in MARK_TOOLS)
    ),
    "searches": lambda o, s, w: o.result.get("modelUsage", {}).get("mock-primary", {}).get("webSearchRequests"),
}


def _run(program: str, web: WebProbe, base: Path, keys: dict[str, object]) -> dict[str, object]:
    (base / "run").mkdir(parents=True)
    with PageServer(base, PAGES) as server:
        observed = observe(program, web.probe(server), base / "run")  # type: ignore[arg-type]
    return {key: VIEW[key](observed, server, web) for key in keys}


@pytest.mark.parametrize("name", list(ROWS))
def test_each_web_probe_is_the_same_in_both_programs_or_differs_by_design(name: str, tmp_path: Path) -> None:
    web, row = ROWS[name]
    assert _run("queryloop", web, tmp_path / "q", row.queryloop) == row.queryloop
    expected = row.expected
    assert _run("claude", web, tmp_path / "c", expected) == expected, f"Claude Code 2.1.235 ({row.verdict})"


def test_both_programs_offer_the_web_tools_with_the_same_input_keys(tmp_path: Path) -> None:
    def offered(program: str) -> dict[str, tuple[list[str], list[str]]]:
        (tmp_path / program).mkdir()
        observed = observe(program, Probe(calls=()), tmp_path / program)  # type: ignore[arg-type]
        definitions = {d["name"]: d for d in observed.requests[0].tool_definitions if d.get("name") in MARK_TOOLS}
        return {
            name: (sorted(d["input_schema"]["properties"]), sorted(d["input_schema"]["required"]))
            for name, d in definitions.items()
        }

    expected = {
        "WebFetch": (["prompt", "url"], ["prompt", "url"]),
        "WebSearch": (["allowed_domains", "blocked_domains", "query"], ["query"]),
    }
    assert offered("queryloop") == expected
    assert offered("claude") == expected
