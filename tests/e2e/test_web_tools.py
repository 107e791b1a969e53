"""WebFetch and WebSearch through the real CLI: a real loopback HTTPS page server, the embedded model server, the
permission rules as a headless run applies them, and what the result counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .harness import MockApi, run_cli
from .pages import HTML_PAGE, SEARCH_REPLY, PageServer


def _scenario(primary: list[dict[str, Any]], small: list[dict[str, Any]] | None = None) -> str:
    models: dict[str, Any] = {"mock-primary": primary}
    if small is not None:
        models["mock-small"] = small
    return json.dumps({"schema_version": 1, "scenario": "web", "model": "mock-primary", "models": models})


def _call(name: str, **tool_input: Any) -> dict[str, Any]:
    return {"reply": {"content": [{"tool_use": {"name": name, "input": tool_input}}]}}


DONE = {"reply": {"content": [{"text": "done"}]}}


def _results(request: Any) -> list[dict[str, Any]]:
    return [b for b in request.messages[-1]["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]


def test_a_page_a_rule_allows_is_fetched_and_the_small_model_answers_about_it(tmp_path: Path) -> None:
    with PageServer(tmp_path, {"/page": HTML_PAGE}) as pages:
        fetch = _call("WebFetch", url=pages.url("/page", scheme="http"), prompt="What is the secret word?")
        scenario = _scenario([fetch, DONE], [{"reply": {"content": [{"text": "It is pelican."}]}}])
        with MockApi(scenario) as api:
            args = [
                "--permission-mode",
                "default",
                "--allowedTools",
                "WebFetch(domain:127.0.0.1)",
                "-p",
                "go",
                "--model",
                "mock-primary",
            ]
            run = run_cli(args, api=api, cwd=tmp_path, ANTHROPIC_SMALL_FAST_MODEL="mock-small", **pages.trust_env())
            requests = api.requests
    assert run.returncode == 0, run.stderr
    assert [r.model for r in requests] == ["mock-primary", "mock-small", "mock-primary"]
    question = requests[1]
    assert question.tools == () and question.stream
    text = question.messages[0]["content"][0]["text"]
    assert "**pelican**" in text and "What is the secret word?" in text and "js-only" not in text
    [result] = _results(requests[2])
    assert (result["content"], result.get("is_error", False)) == ("It is pelican.", False)
    assert pages.seen == ["/page"]  # over https: the server speaks nothing else
    usage = run.result["modelUsage"]
    assert set(usage) == {"mock-primary", "mock-small"}
    assert run.result["usage"]["input_tokens"] == usage["mock-primary"]["inputTokens"]  # the loop's alone
    assert run.result["permission_denials"] == []


def test_a_headless_run_without_a_rule_denies_webfetch_and_fetches_nothing(tmp_path: Path) -> None:
    with PageServer(tmp_path, {"/page": HTML_PAGE}) as pages:
        scenario = _scenario([_call("WebFetch", url=pages.url("/page"), prompt="p"), DONE])
        with MockApi(scenario) as api:
            run = run_cli(
                ["--permission-mode", "default", "-p", "go", "--model", "mock-primary"],
                api=api,
                cwd=tmp_path,
                **pages.trust_env(),
            )
    assert [d["tool_name"] for d in run.result["permission_denials"]] == ["WebFetch"]
    assert pages.seen == []


def test_even_bypass_mode_reaches_loopback_only_for_a_host_a_rule_names(tmp_path: Path) -> None:
    with PageServer(tmp_path, {"/page": HTML_PAGE}) as pages:
        scenario = _scenario([_call("WebFetch", url=pages.url("/page"), prompt="p"), DONE])
        with MockApi(scenario) as api:
            run = run_cli(
                ["-p", "go", "--model", "mock-primary"], api=api, cwd=tmp_path, **pages.trust_env()
            )  # the harness's bypass mode
            [result] = _results(api.requests[1])
    assert run.returncode == 0, run.stderr
    assert result["is_error"] and "loopback" in result["content"] and "WebFetch(domain:127.0.0.1)" in result["content"]
    assert pages.seen == []


def test_a_web_search_request_carries_the_server_tool_and_its_hits_reach_the_model(tmp_path: Path) -> None:
    search = _call("WebSearch", query="pelican facts", blocked_domains=["evil.example"])
    with MockApi(_scenario([search, SEARCH_REPLY, DONE])) as api:
        run = run_cli(
            ["--permission-mode", "default", "--allowedTools", "WebSearch", "-p", "go", "--model", "mock-primary"],
            api=api,
            cwd=tmp_path,
        )
        requests = api.requests
    assert run.returncode == 0, run.stderr
    assert [r.model for r in requests] == ["mock-primary"] * 3
    assert requests[1].tool_definitions == (
        {"type": "web_search_20250305", "name": "web_search", "blocked_domains": ["evil.example"], "max_uses": 8},
    )
    assert "pelican facts" in requests[1].messages[0]["content"][0]["text"]
    [result] = _results(requests[2])
    assert 'Links: [{"title":"Pelicans","url":"https://birds.example/pelicans"}]' in result["content"]
    assert "Pelicans have large bills." in result["content"]
    assert run.result["modelUsage"]["mock-primary"]["webSearchRequests"] == 1


def test_a_headless_run_without_a_rule_denies_websearch_and_sends_no_search(tmp_path: Path) -> None:
    with MockApi(_scenario([_call("WebSearch", query="pelican facts"), DONE])) as api:
        run = run_cli(["--permission-mode", "default", "-p", "go", "--model", "mock-primary"], api=api, cwd=tmp_path)
        requests = api.requests
    assert [d["tool_name"] for d in run.result["permission_denials"]] == ["WebSearch"]
    assert len(requests) == 2 and all(r.tools and "WebSearch" in r.tools for r in requests)


def test_a_subagents_web_requests_count_in_the_parents_model_usage_and_cost(tmp_path: Path) -> None:
    child = "CHILD-TASK read the page"
    with PageServer(tmp_path, {"/page": HTML_PAGE}) as pages:
        fetch = _call("WebFetch", url=pages.url("/page"), prompt="What is the secret word?")
        agent = _call("Agent", description="read a page", prompt=child, run_in_background=False)
        rules = [
            {"when": {"first_user_contains": "CHILD-TASK"}, "times": 1, **fetch},
            {"when": {"first_user_contains": "CHILD-TASK"}, "times": 1, **DONE},
        ]
        document = json.loads(_scenario([agent, DONE], [{"reply": {"content": [{"text": "It is pelican."}]}}]))
        with MockApi(json.dumps({**document, "rules": rules})) as api:
            args = ["--permission-mode", "default", "--allowedTools", "WebFetch(domain:127.0.0.1)"]
            run = run_cli(
                [*args, "-p", "go", "--model", "mock-primary"],
                api=api,
                cwd=tmp_path,
                ANTHROPIC_SMALL_FAST_MODEL="mock-small",
                **pages.trust_env(),
            )
            models = [r.model for r in api.requests]
    assert run.returncode == 0, run.stderr
    assert models.count("mock-small") == 1 and pages.seen == ["/page"]
    small = run.result["modelUsage"]["mock-small"]
    assert small["inputTokens"] > 0 and small["costUSD"] > 0
    assert run.result["total_cost_usd"] >= run.result["modelUsage"]["mock-primary"]["costUSD"] + small["costUSD"]


HOSTILE_URLS = (
    "file:///etc/passwd",
    "gopher://127.0.0.1:PORT/_GET",
    "https://169.254.169.254/latest/meta-data/",
    "https://2852039166/latest/meta-data/",
    "https://0xa9fea9fe/latest/meta-data/",
    "https://10.0.0.1/admin",
    "https://[::1]:PORT/page",
    "https://[::ffff:127.0.0.1]:PORT/page",
    "https://allowed.example@127.0.0.1:PORT/page",
    "https://127.0.0.1:PORT\\@allowed.example/page",
    "https://localhost:PORT/page",
    "https://127.0.0.1:PORT/page\r\nX-Injected: 1",
)


def test_hostile_urls_get_error_results_and_reach_nothing_while_a_named_host_is_fetched(tmp_path: Path) -> None:
    with PageServer(tmp_path, {"/page": HTML_PAGE}) as pages:
        urls = [u.replace("PORT", str(pages.port)) for u in (*HOSTILE_URLS, "https://127.0.0.1:PORT/page")]
        calls = [{"tool_use": {"name": "WebFetch", "input": {"url": u, "prompt": "p"}}} for u in urls]
        scenario = _scenario([{"reply": {"content": calls}}, DONE], [{"reply": {"content": [{"text": "ok"}]}}])
        with MockApi(scenario) as api:
            args = ["--allowedTools", "WebFetch", "--allowedTools", "WebFetch(domain:127.0.0.1)"]
            run = run_cli(
                [*args, "-p", "go", "--model", "mock-primary"],
                api=api,
                cwd=tmp_path,
                ANTHROPIC_SMALL_FAST_MODEL="mock-small",
                **pages.trust_env(),
            )
            results = _results(api.requests[-1])
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert [r.get("is_error", False) for r in results] == [True] * len(HOSTILE_URLS) + [False]
    assert pages.seen == ["/page"]  # the named host alone, once
