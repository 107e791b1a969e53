"""A real browser for the inspector's tests and screenshots: Debian's chromium, driven by Selenium.

Nothing is downloaded: the browser is ``/usr/bin/chromium`` and the driver
``/usr/bin/chromedriver`` (``tools/test.sh`` installs both with apt-get when missing), so
Selenium's own manager never runs. :class:`UiServer` starts the real ``queryloop ui`` in
a subprocess and reads the URL it prints.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


def chromium(profile: Path, *, width: int = 1400, height: int = 1000) -> webdriver.Chrome:
    """A headless chromium with a new empty profile in ``profile``."""
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    return webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))


class UiServer:
    """``queryloop ui`` in a subprocess: ``url`` is what it printed (token included), ``base`` the same without it."""

    def __init__(self, home: Path, traces: Path | None, *extra: str, env: dict[str, str] | None = None) -> None:
        cmd = [sys.executable, "-m", "queryloop", "ui", *(["--traces", str(traces)] if traces else []), *extra]
        env = {**os.environ, "QUERYLOOP_HOME": str(home), **(env or {})}
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=env)
        self.url = ""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:  # the URL line comes last, once the socket listens
            if line.startswith("open http"):
                self.url = line.split()[1]
                break
        if not self.url:
            self.proc.wait(10)
            self.stderr.seek(0)
            raise RuntimeError(f"queryloop ui printed no URL (exit {self.proc.returncode}): {self.stderr.read()}")
        self.base = self.url.split("/#token=")[0]
        self.token = self.url.split("token=")[1]

    def __enter__(self) -> UiServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.stderr.close()
