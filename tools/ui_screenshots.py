"""Take the screenshots of ``queryloop ui`` in docs/screenshots/ the way the tests drive it: real runs, real browser.

Usage: ``python3 tools/ui_screenshots.py [--out docs/screenshots]``. In a fresh
``$QUERYLOOP_HOME``, runs the shipped ``fallback_chain`` scenario's script (three 529s, the
fallback model, an Edit, a Bash side effect) and a run that waits in a Bash call until
a file appears, both through the real ``anthropic`` SDK against the embedded server with
``QUERYLOOP_TRACE_DIR`` set; serves them with the real ``queryloop ui`` and photographs
the pages in Debian's headless chromium (tests/e2e/browser.py: nothing is downloaded).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from queryloop.machines import MACHINES_DIR  # noqa: E402
from tests.e2e.browser import UiServer, chromium  # noqa: E402
from tests.e2e.harness import MockApi, cli_env, run_cli  # noqa: E402
from tests.e2e.test_ui import WAITS_FOR_A_FILE  # noqa: E402


def _until(driver: WebDriver, what: str, check: object) -> None:
    WebDriverWait(driver, 60, poll_frequency=0.1).until(check, message=what)  # type: ignore[arg-type]


def _state(layer: str, name: str) -> str:
    """XPath of state ``name``'s node on layer ``layer``'s diagram (Graphviz titles each node with its name)."""
    node = f"*[local-name()='g'][contains(@class, 'node')][*[local-name()='title' and text()='{name}']]"
    return f"//details[@data-layer='{layer}']//{node}"


def _shot(driver: WebDriver, where: str, path: Path) -> None:
    """The window, scrolled so what ``where`` (CSS, or XPath from ``//``) names is in its middle."""
    element = driver.find_element(By.XPATH if where.startswith("//") else By.CSS_SELECTOR, where)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'})", element)
    time.sleep(0.3)  # let the scroll settle before the picture (a picture, not a test)
    driver.save_screenshot(str(path))
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    out = parser.parse_args().out.resolve()
    with tempfile.TemporaryDirectory(prefix="queryloop-ui-shots-") as scratch:
        tmp = Path(scratch)
        home, traces, work, live, profile = (tmp / n for n in ("home", "traces", "work", "live", "profile"))
        for folder in (home, traces, work, live, profile):
            folder.mkdir()
        env = {"QUERYLOOP_HOME": str(home), "QUERYLOOP_TRACE_DIR": str(traces)}
        (work / "checkpoint.txt").write_text("step=0\n")
        scenario = (MACHINES_DIR / "scenarios" / "fallback_chain.yaml").read_text()
        prompt = "Advance the checkpoint and record that it is done."
        with MockApi(scenario) as api:
            run = run_cli(
                ["-p", prompt, "--model", "mock-primary", "--fallback-model", "mock-fallback"],
                api=api,
                cwd=work,
                **env,
            )
        if run.returncode != 0:
            sys.exit(f"the fallback_chain run failed: {run.stderr}")
        with UiServer(home, traces) as ui:
            driver = chromium(profile, width=1400, height=900)
            try:
                driver.get(ui.url)
                _until(driver, "the list", lambda d: d.find_elements(By.CSS_SELECTOR, "#sessions tbody tr"))
                _shot(driver, "h1", out / "ui-sessions.png")
                driver.find_element(By.CSS_SELECTOR, "a.session-link").click()
                _until(driver, "the end", lambda d: d.find_element(By.ID, "status").text.startswith("ended"))
                _shot(driver, _state("request", "backing_off"), out / "ui-path.png")
                _context(driver, out)
                _shot(driver, "#counters", out / "ui-counters.png")
                driver.find_element(By.ID, "rewind-button").click()
                _until(driver, "the dry run", lambda d: d.find_element(By.ID, "rewind-result").text)
                _shot(driver, "#rewind-result", out / "ui-rewind.png")
                _live(driver, ui, live, env, out)
            finally:
                driver.quit()
    return 0


def _context(driver: WebDriver, out: Path) -> None:
    """The context layer, four windows wide at its own size: its box as the page opens it, then the whole layer."""
    box = "details[data-layer=context]"
    _shot(driver, f"{box} .picture", out / "ui-context.png")
    driver.find_element(By.CSS_SELECTOR, f"{box} .fit-toggle").click()
    _shot(driver, f"{box} .picture", out / "ui-context-whole.png")
    driver.find_element(By.CSS_SELECTOR, f"{box} .fit-toggle").click()


def _live(driver: WebDriver, ui: UiServer, live: Path, env: dict[str, str], out: Path) -> None:
    """A run held in its Bash call (it waits for a file): its state outlined on the tools layer."""
    session_id = str(uuid.uuid4())
    with MockApi(WAITS_FOR_A_FILE) as api:
        cmd = [sys.executable, "-m", "queryloop", "run", "-p", "wait for the release", "--model", "mock-primary"]
        cmd += ["--session-id", session_id, "--cwd", str(live), "--permission-mode", "bypassPermissions"]
        proc = subprocess.Popen(cmd, env=cli_env(api, **env), cwd=ROOT, stdout=subprocess.DEVNULL)
        try:
            home = Path(env["QUERYLOOP_HOME"])
            _until(driver, "the transcript", lambda d: any(home.glob(f"projects/*/{session_id}.jsonl")))
            driver.get(f"{ui.base}/session/{session_id}")
            held = "now in running_tools"  # the Bash call waits for a file: the run stays there until it appears
            _until(driver, "the live state", lambda d: held in d.find_element(By.ID, "status").text)
            _until(driver, "its outline", lambda d: d.find_elements(By.CSS_SELECTOR, "#layers g.node.current"))
            _shot(driver, "#layers g.node.current", out / "ui-live.png")
        finally:
            (live / "release").touch()
            proc.wait(60)


if __name__ == "__main__":
    raise SystemExit(main())
