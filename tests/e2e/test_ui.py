"""``queryloop ui`` in a real browser: Debian's chromium, driven by Selenium, over sessions real runs wrote.

Each session here is a real ``queryloop run`` through the ``anthropic`` SDK against the
embedded server, writing its transcript, ledger and checkpoints under this module's
``$QUERYLOOP_HOME`` and its path under ``QUERYLOOP_TRACE_DIR``; the inspector is the real
``queryloop ui`` subprocess, and one chromium serves the whole module. Waits poll the page
until what it shows is true (or a generous limit passes); nothing asserts a duration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from queryloop.frontends.cli import main

from .browser import UiServer, chromium
from .harness import ROOT, MockApi, cli_env, run_cli

# a browser and five runs: tools/test.sh --fast leaves the module out. One xdist worker runs the whole module (its
# group), so the module's runs, inspector and browser are started once per run, not once per worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ui")]

WAIT_S = 60  # the most any wait below polls for; a wait that ends sooner passes at once

EDITS = textwrap.dedent(
    """
    schema_version: 1
    scenario: ui_edits
    model: mock-primary
    models:
      mock-primary:
        - reply:
            content:
              - text: "Rewriting notes.txt."
              - tool_use: {name: Write, input: {file_path: notes.txt, content: "new notes\\n"}}
        - reply:
            content:
              - tool_use: {name: Bash, input: {command: "echo deployed >> side.log", description: Deploy}}
        - reply:
            content:
              - text: "Notes rewritten and deployed."
            stop_reason: end_turn
    """
)
MARKUP = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\"><b>bold?</b>"
ANSWERS_MARKUP = textwrap.dedent(
    f"""
    schema_version: 1
    scenario: ui_markup
    model: mock-primary
    models:
      mock-primary:
        - reply:
            content:
              - text: {json.dumps("echo: " + MARKUP)}
    """
)
WAITS_FOR_A_FILE = textwrap.dedent(
    """
    schema_version: 1
    scenario: ui_live
    model: mock-primary
    models:
      mock-primary:
        - reply:
            content:
              - tool_use:
                  name: Bash
                  input: {command: "until [ -e release ]; do sleep 0.05; done; echo released", description: Wait}
        - reply:
            content:
              - text: "Released."
            stop_reason: end_turn
    """
)
AN_AGENT = textwrap.dedent(
    """
    schema_version: 1
    scenario: ui_agent
    model: mock-primary
    rules:
      - when: {first_user_contains: CHILD-TASK}
        reply: {content: [{text: "the child found three files"}]}
    models:
      mock-primary:
        - reply:
            content:
              - tool_use:
                  name: Agent
                  input: {description: count the files, prompt: "CHILD-TASK count them", run_in_background: false}
        - reply:
            content:
              - text: "Three files."
    """
)


@pytest.fixture(scope="module")
def where(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ui")
    found = {name: root / name for name in ("home", "traces", "work", "markup", "live", "profile", "agent")}
    for path in found.values():
        path.mkdir()
    return found


def _run(where: dict[str, Path], scenario: str, prompt: str, cwd: Path) -> str:
    with MockApi(scenario) as api:
        run = run_cli(
            ["-p", prompt, "--model", "mock-primary"],
            api=api,
            cwd=cwd,
            QUERYLOOP_HOME=str(where["home"]),
            QUERYLOOP_TRACE_DIR=str(where["traces"]),
        )
    assert run.returncode == 0, run.stderr
    return str(run.result["session_id"])


@pytest.fixture(scope="module")
def sessions(where: dict[str, Path]) -> dict[str, str]:
    (where["work"] / "notes.txt").write_text("old notes\n")
    edits = _run(where, EDITS, "rewrite the notes and deploy", where["work"])
    markup = _run(where, ANSWERS_MARKUP, MARKUP, where["markup"])
    agent = _run(where, AN_AGENT, "count the files with an agent", where["agent"])
    return {"edits": edits, "markup": markup, "agent": agent}


@pytest.fixture(scope="module")
def ui(where: dict[str, Path], sessions: dict[str, str]) -> Iterator[UiServer]:
    with UiServer(where["home"], where["traces"]) as server:
        yield server


@pytest.fixture(scope="module")
def browser(where: dict[str, Path], ui: UiServer) -> Iterator[WebDriver]:
    driver = chromium(where["profile"])
    try:
        driver.get(ui.url)  # the token once, in the fragment: the page keeps it for its origin and drops it
        yield driver
    finally:
        driver.quit()


def _wait(driver: WebDriver, what: str, check: Any) -> Any:
    # the page redraws as a live run goes on: an element found just before a redraw is stale, and looked up again
    wait = WebDriverWait(driver, WAIT_S, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,))
    return wait.until(lambda d: check(d), message=what)


def _text(driver: WebDriver, css: str) -> str:
    return "\n".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, css))


def _current(driver: WebDriver) -> list[str]:
    """The names of the states outlined as the current one (an SVG ``<title>`` has no rendered text: its content)."""
    found = driver.find_elements(By.CSS_SELECTOR, "#layers g.node.current title")
    return [e.get_attribute("textContent") or "" for e in found]


def _steps(where: dict[str, Path], session_id: str) -> list[dict[str, Any]]:
    lines = [line for p in where["traces"].glob(f"{session_id}-*.jsonl") for line in p.read_text().splitlines()]
    return [json.loads(line) for line in lines]


def _open(driver: WebDriver, ui: UiServer, session_id: str) -> None:
    driver.get(f"{ui.base}/session/{session_id}")


def test_the_list_shows_every_session_with_how_it_ended(browser: WebDriver, ui: UiServer, sessions: dict[str, str]):
    browser.get(ui.base + "/")
    rows = _wait(browser, "the session rows", lambda d: d.find_elements(By.CSS_SELECTOR, "#sessions tbody tr"))
    shown = {r.find_element(By.CSS_SELECTOR, "a.session-link").text: r.text for r in rows}
    assert set(sessions.values()) <= set(shown)  # (a test below may add one more)
    assert all(text.endswith("completed") for text in shown.values()), shown
    assert browser.current_url == ui.base + "/"  # the token left the address bar after the first visit


def test_a_session_shows_its_transcript_and_its_path_with_each_edge_s_count(
    browser: WebDriver, ui: UiServer, sessions: dict[str, str], where: dict[str, Path]
):
    session_id = sessions["edits"]
    steps = _steps(where, session_id)
    _open(browser, ui, session_id)
    _wait(browser, "the end", lambda d: d.find_element(By.ID, "status").text.startswith("ended"))
    assert browser.find_element(By.ID, "status").text == f"ended in completed after {len(steps)} steps"
    transcript = _text(browser, "#transcript")
    for said in ("rewrite the notes and deploy", "Rewriting notes.txt.", "Notes rewritten and deployed."):
        assert said in transcript
    _wait(browser, "the tools layer", lambda d: d.find_elements(By.CSS_SELECTOR, "details[data-layer=tools] svg"))
    tools = browser.find_element(By.CSS_SELECTOR, "details[data-layer=tools] svg").get_attribute("textContent") or ""
    turns = [s["step"] + 1 for s in steps if s["reason"] == "next_turn"]
    assert len(turns) == 2
    assert f"×2: steps {turns[0]}, {turns[1]}" in tools  # the edge taken twice, at the steps it was taken
    rows = browser.find_elements(By.CSS_SELECTOR, "#steps tbody tr")
    assert len(rows) == len(steps)


def test_the_ledger_checkpoints_and_a_rewind_dry_run_change_nothing(
    browser: WebDriver, ui: UiServer, sessions: dict[str, str], where: dict[str, Path]
):
    _open(browser, ui, sessions["edits"])
    ledger = _wait(browser, "the ledger", lambda d: _text(d, "#ledger tbody"))
    assert "Bash" in ledger and "echo deployed >> side.log" in ledger
    assert str(where["work"] / "notes.txt") in _text(browser, "#checkpoints tbody")
    browser.find_element(By.ID, "rewind-button").click()
    result = _wait(browser, "the dry run", lambda d: _text(d, "#rewind-result"))
    # notes.txt goes back; side.log, which the Bash redirection created, goes away, and that
    # call stays listed as not undone (it may have done more than write the file)
    assert "dry run: 2 file(s) would be restored; nothing was changed" in result
    assert "-new notes" in result and "+old notes" in result and "-deployed" in result
    assert 'Bash {"command": "echo deployed >> side.log"' in result.split("cannot undo")[1]
    assert (where["work"] / "notes.txt").read_text() == "new notes\n"
    assert (where["work"] / "side.log").read_text() == "deployed\n"


SMALLEST_LABEL_PX = 9  # below this a label is a smudge on a 1 400 px window (the context layer's were 3 px)


def test_every_layers_smallest_label_is_readable_in_a_1400_pixel_window(
    browser: WebDriver, ui: UiServer, sessions: dict[str, str]
):
    assert browser.get_window_size()["width"] == 1400
    _open(browser, ui, sessions["edits"])
    _wait(browser, "the context layer", lambda d: d.find_elements(By.CSS_SELECTOR, "details[data-layer=context] svg"))
    smallest = browser.execute_script(
        """
        const sizes = {};
        for (const box of document.querySelectorAll("#layers details")) {
          box.open = true;
          const heights = [...box.querySelectorAll("svg text")]
            .filter((t) => t.textContent.trim())
            .map((t) => t.getBoundingClientRect().height);
          sizes[box.dataset.layer] = Math.min(...heights);
        }
        return sizes;
        """
    )
    assert "context" in smallest
    small = {layer: px for layer, px in smallest.items() if px < SMALLEST_LABEL_PX}
    assert not small, f"labels smaller than {SMALLEST_LABEL_PX} px: {small}"


CONTEXT_NODE = "//details[@data-layer='context']//*[local-name()='g'][*[local-name()='title' and text()='{name}']]"
SHOWN_IN_ITS_BOX = """
const [layer, name] = arguments;
const picture = document.querySelector(`details[data-layer=${layer}] .picture`);
const node = [...picture.querySelectorAll("g.node")].find((n) => n.querySelector("title").textContent === name);
const box = picture.getBoundingClientRect(), at = node.getBoundingClientRect();
return at.left >= box.left && at.right <= box.left + picture.clientWidth
  && at.top >= box.top && at.bottom <= box.top + picture.clientHeight;
"""


def test_the_context_layer_opens_on_the_runs_path_and_shows_whole_at_a_click_in_a_1400_pixel_window(
    browser: WebDriver, ui: UiServer, sessions: dict[str, str]
):
    """At its own size the context layer is four windows wide: its box opened on the legend, the path out of sight."""
    assert browser.get_window_size()["width"] == 1400
    _open(browser, ui, sessions["edits"])
    box = "details[data-layer=context]"
    _wait(browser, "the context layer", lambda d: d.find_elements(By.CSS_SELECTOR, f"{box} svg"))
    shown = lambda d: d.execute_script(SHOWN_IN_ITS_BOX, "context", "checking_context")  # noqa: E731
    _wait(browser, "the path's state in view", shown)
    browser.find_element(By.CSS_SELECTOR, f"{box} .fit-toggle").click()
    fits = "const p = document.querySelector(arguments[0]); return p.scrollWidth <= p.clientWidth"
    fits += " && p.scrollHeight <= p.clientHeight"
    _wait(browser, "the whole layer in its box", lambda d: d.execute_script(fits, f"{box} .picture"))
    node = browser.find_element(By.XPATH, CONTEXT_NODE.format(name="checking_context"))
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", node)
    ActionChains(browser).move_to_element(node).click().perform()
    _wait(browser, "back at its own size", lambda d: not d.execute_script(fits, f"{box} .picture"))
    assert shown(browser), "the state clicked on is in view at its own size"


def test_a_session_lists_its_sub_agents_with_how_each_ended_and_its_answer(
    browser: WebDriver, ui: UiServer, sessions: dict[str, str], where: dict[str, Path]
):
    _open(browser, ui, sessions["agent"])
    # the path drawn is the session's own: the sub-agent's run is recorded apart
    assert list(where["traces"].glob(f"{sessions['agent']}.agent-a*.jsonl"))
    steps = _steps(where, sessions["agent"])
    _wait(browser, "the end", lambda d: d.find_element(By.ID, "status").text.startswith("ended"))
    assert browser.find_element(By.ID, "status").text == f"ended in completed after {len(steps)} steps"
    agents = _wait(browser, "the sub-agents", lambda d: _text(d, "#agents tbody"))
    assert "general-purpose" in agents and "count the files" in agents and "waited for" in agents
    assert "completed · 1 turn(s)" in agents and "the child found three files" in agents
    assert not browser.find_element(By.ID, "no-agents").is_displayed()
    _open(browser, ui, sessions["edits"])
    _wait(browser, "no sub-agents", lambda d: d.find_element(By.ID, "no-agents").is_displayed())


def test_a_run_without_the_trace_variable_records_its_path_in_its_session_and_the_page_draws_it(
    browser: WebDriver, ui: UiServer, where: dict[str, Path], tmp_path: Path
):
    with MockApi(ANSWERS_MARKUP) as api:
        run = run_cli(
            ["-p", "hello", "--model", "mock-primary"],
            api=api,
            cwd=tmp_path,
            QUERYLOOP_HOME=str(where["home"]),
            QUERYLOOP_TRACE_DIR="",  # unset: the session's own folder keeps the path
        )
    assert run.returncode == 0, run.stderr
    session_id = str(run.result["session_id"])
    (steps,) = where["home"].glob(f"projects/*/{session_id}/steps/{session_id}-*.jsonl")
    count = len(steps.read_text().splitlines())
    _open(browser, ui, session_id)
    _wait(browser, "the end", lambda d: d.find_element(By.ID, "status").text.startswith("ended"))
    assert browser.find_element(By.ID, "status").text == f"ended in completed after {count} steps"


def test_the_current_state_is_highlighted_live_while_a_run_is_in_progress(
    browser: WebDriver, ui: UiServer, where: dict[str, Path]
):
    session_id = str(uuid.uuid4())
    with MockApi(WAITS_FOR_A_FILE) as api:
        cmd = [sys.executable, "-m", "queryloop", "run", "-p", "wait for the release", "--model", "mock-primary"]
        cmd += ["--session-id", session_id, "--cwd", str(where["live"]), "--permission-mode", "bypassPermissions"]
        env = cli_env(api, QUERYLOOP_HOME=str(where["home"]), QUERYLOOP_TRACE_DIR=str(where["traces"]))
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _wait(browser, "the run's transcript", lambda d: any(where["home"].glob(f"projects/*/{session_id}.jsonl")))
            _open(browser, ui, session_id)
            _wait(browser, "running_tools outlined", lambda d: _current(d) == ["running_tools"])
            node = browser.find_element(By.CSS_SELECTOR, "#layers g.node.current")
            box = node.find_element(By.XPATH, "./ancestor::details")
            assert box.get_attribute("data-layer") == "tools"
            assert "running · " in browser.find_element(By.ID, "status").text
            assert "now in running_tools (layer tools)" in browser.find_element(By.ID, "status").text
            label = browser.find_element(By.CSS_SELECTOR, "#layers g.node.current").get_attribute("textContent")
            assert "● running, now here: running_tools" in (label or "")
            picture = box.find_element(By.TAG_NAME, "svg").get_attribute("textContent") or ""
            assert "steps, still running" in picture and "ended running_tools" not in picture
            (where["live"] / "release").touch()
            assert proc.wait(WAIT_S) == 0, proc.stderr.read() if proc.stderr else ""
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
    _wait(browser, "the end", lambda d: d.find_element(By.ID, "status").text.startswith("ended in completed"))
    assert browser.find_elements(By.CSS_SELECTOR, "#layers g.node.current") == []
    assert "Released." in _text(browser, "#transcript")


def test_markup_in_a_transcript_is_shown_as_text_and_never_runs(
    browser: WebDriver, ui: UiServer, sessions: dict[str, str]
):
    _open(browser, ui, sessions["markup"])
    transcript = _wait(browser, "the transcript", lambda d: _text(d, "#transcript"))
    assert MARKUP in transcript and "echo: " + MARKUP in transcript
    assert browser.find_elements(By.CSS_SELECTOR, "#transcript script, #transcript img, #transcript b") == []
    assert browser.execute_script("return document.scripts.length") == 1  # the page's own ui.js
    assert browser.title == "queryloop · session"


def _get(url: str, *, token: str | None = None, cookie: str | None = None) -> tuple[int, dict[str, str], str]:
    headers = {"X-Queryloop-Token": token} if token is not None else {}
    request = urllib.request.Request(url, headers={**headers, "Cookie": cookie} if cookie else headers)
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None


@pytest.mark.parametrize("path", ["/api/sessions", "/api/sessions/x/path", "/api/sessions?token={token}"])
def test_a_request_for_data_without_the_token_or_with_a_wrong_one_is_refused(ui: UiServer, path: str):
    status, _, body = _get(ui.base + path.format(token=ui.token))
    assert status == 403 and body.startswith("forbidden: this page needs the token")
    assert _get(ui.base + "/api/sessions", token="wrong")[0] == 403


def test_the_token_is_bound_to_the_port_it_is_sent_in_a_header_never_a_cookie(
    browser: WebDriver, ui: UiServer, sessions: dict[str, str]
):
    # a cookie goes to every port of the host, whatever its name: the answers set none, and one is no credential
    port = ui.base.rsplit(":", 1)[1]
    for cookie in (f"queryloop_ui_{port}={ui.token}", f"queryloop_ui={ui.token}", f"token={ui.token}"):
        assert _get(ui.base + "/api/sessions", cookie=cookie)[0] == 403
    for path in ("/", f"/session/{sessions['edits']}", "/static/ui.js", "/api/sessions"):
        status, headers, _ = _get(ui.base + path, token=ui.token)
        assert status == 200 and "set-cookie" not in {k.lower() for k in headers}, path
    browser.get(ui.url)
    _wait(browser, "the session rows", lambda d: d.find_elements(By.CSS_SELECTOR, "#sessions tbody tr"))
    assert browser.get_cookies() == []  # the page read its data with the token kept for its origin alone
    assert browser.execute_script("return localStorage.getItem('queryloop-ui-token')") == ui.token


def test_the_header_opens_the_data_and_every_answer_has_a_strict_content_security_policy(ui: UiServer):
    status, headers, body = _get(ui.base + "/api/sessions", token=ui.token)
    assert status == 200 and json.loads(body)["sessions"]
    assert headers["content-security-policy"].startswith("default-src 'none'; script-src 'self'")
    status, headers, _ = _get(ui.base + "/")
    assert (
        status == 200
        and headers["content-security-policy"] == _get(ui.base + "/api/sessions")[1]["content-security-policy"]
    )


def test_the_browser_without_the_token_is_refused(browser: WebDriver, ui: UiServer):
    browser.execute_script("localStorage.clear()")
    try:
        browser.get(ui.base + "/")
        found = lambda d: "forbidden: this page needs the token" in d.find_element(By.TAG_NAME, "body").text  # noqa: E731
        _wait(browser, "the refusal", found)
    finally:
        browser.get(ui.url)


def test_a_queryloop_home_owned_by_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    home = Path("/")  # root's: another user's for anyone but root
    if os.geteuid() == 0:
        home = tmp_path / "theirs"
        home.mkdir()
        os.chown(home, 65534, 65534)
    monkeypatch.setenv("QUERYLOOP_HOME", str(home))
    assert main(["ui"]) == 1  # in process: it stops before it listens
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"queryloop ui: {home} (QUERYLOOP_HOME) belongs to uid ")


@pytest.mark.parametrize("sid", ["0b6c3f0e-5d1a-4c2e-9f7a-2b8d4e6f1a3c", "..", "NOT-A-SESSION"])
def test_an_unknown_session_is_a_404_that_names_it(ui: UiServer, where: dict[str, Path], sid: str):
    for path in ("", "/path", "/rewind", "/layers/request.svg"):
        status, headers, body = _get(f"{ui.base}/api/sessions/{sid}{path}", token=ui.token)
        assert status == 404 and headers["content-type"] == "application/json", (path, body)
        assert json.loads(body)["error"].startswith("no session ")


def test_a_trace_another_machine_wrote_is_reported_and_left_out(
    ui: UiServer, sessions: dict[str, str], where: dict[str, Path]
):
    session_id = sessions["markup"]
    kept = len(_steps(where, session_id))
    foreign = where["traces"] / f"{session_id}-foreign.jsonl"
    step = {"type": "system", "subtype": "transition", "from": "calling_model", "event": "teleported"}
    foreign.write_text(json.dumps({**step, "reason": "wormhole", "to": "completed"}) + "\n")
    try:
        status, _, body = _get(f"{ui.base}/api/sessions/{session_id}/path", token=ui.token)
    finally:
        foreign.unlink()
    path = json.loads(body)
    assert status == 200 and len(path["steps"]) == kept
    (problem,) = path["problems"]
    assert f"{foreign}:1: step 1 (calling_model --teleported--> completed by 'wormhole') is not an edge" in problem


def test_a_bad_port_or_host_is_one_line_and_no_traceback(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as usage:
        main(["ui", "--port", "99999"])
    assert usage.value.code == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert said == [
        "queryloop ui: error: argument --port: '99999' is not a port: give a number from 0 (any free one) to 65535 "
        "(see queryloop ui --help)"
    ]
    assert main(["ui", "--host", "256.1.1.1"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("queryloop ui: cannot listen on 256.1.1.1:0: ")


def test_the_command_names_the_variable_runs_record_their_paths_by():
    from queryloop.run.tracing import TRACE_DIR_ENV
    from queryloop.ui.command import TRACE_DIR_ENV as SAID

    assert SAID == TRACE_DIR_ENV


def test_a_fleet_database_s_sessions_workers_and_calls_are_shown(
    browser: WebDriver, where: dict[str, Path], sessions: dict[str, str], tmp_path: Path
):
    """``--database-url``: the fleet's sessions are listed beside the files' and shown from the database. The
    database holds a real run's transcript, written as a worker writes it (test_fleet runs a real worker and reads
    the same API)."""
    from queryloop.fleet.database import FleetDatabase

    url = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    db = FleetDatabase(url)
    try:
        db.create_tables()
        sid = str(uuid.uuid4())
        (transcript,) = where["home"].glob(f"projects/*/{sessions['edits']}.jsonl")
        for seq, line in enumerate(transcript.read_text().splitlines(), 1):
            db.append_transcript(sid, seq, {**json.loads(line), "sessionId": sid})
        assert db.begin_call(f"{sid}/toolu_deploy", session_id=sid, tool="Bash", executor_id="worker-a") is None
        db.complete_call(f"{sid}/toolu_deploy", {"type": "tool_result", "content": "deployed"})
        db.beat("worker-a", pid=4242, host="build-1")
    finally:
        db.close()
    with UiServer(where["home"], where["traces"], "--database-url", url) as fleet_ui:
        browser.get(fleet_ui.url)
        rows = _wait(browser, "the fleet's row", lambda d: _text(d, "#sessions tbody"))
        assert sid in rows and sessions["edits"] in rows
        workers = _wait(browser, "the workers", lambda d: _text(d, "#workers tbody"))
        assert "worker-a" in workers and "build-1" in workers and "4242" in workers
        _open(browser, fleet_ui, sid)
        transcript = _wait(browser, "the transcript", lambda d: _text(d, "#transcript"))
        assert "Notes rewritten and deployed." in transcript
        calls = _wait(browser, "the calls", lambda d: _text(d, "#calls tbody"))
        assert "toolu_deploy" in calls and "worker-a" in calls and "completed" in calls
        assert "on the fleet" in browser.find_element(By.ID, "where").text
