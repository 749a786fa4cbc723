"""``ateam console --web`` as a real process, driven by a real browser.

Debian's Chromium, headless, through Selenium and Debian's chromedriver (``.ci/run``
installs both; a missing one fails these tests, it does not skip them). WebGL is off,
so xterm.js draws the terminal as DOM text that the test reads from the page.

The agent is a real ``ateam agent`` on the test's own ``redis-server``; each browser
tab's console is a real process the server starts.

``ATEAM_UPDATE_SCREENSHOT=1`` also saves the page to ``docs/images/web-console.png``
(the README's picture); without it the tree is left as it is.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import socket
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from tests._wait import wait_for
from tests.integration.conftest import (
    KEYS,
    START_TIMEOUT_S,
    AgentFactory,
    Bus,
    ConsoleProcess,
    ateam_cmd,
    run_ateam,
    subprocess_env,
    write_project,
)

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# Without WebGL xterm.js falls back to DOM text, which the page's text then holds.
CHROME_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-webgl",
    "--disable-3d-apis",
    "--window-size=1280,720",
)
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "images" / "web-console.png"
AGENT = "hello/zeus"
SESSION_MODULE = "ateam.console.web"
_URL = re.compile(r"open (http://\S+/\?token=(\S+))")


# --- the server and the browser -------------------------------------------------------------


class WebServer:
    """An ``ateam console --web`` process and the URL (with its token) it printed."""

    def __init__(self, console: ConsoleProcess) -> None:
        self.console = console
        found = _URL.search(console.wait_line("?token="))
        assert found is not None
        self.url, self.token = found.group(1), found.group(2)
        parts = urlsplit(self.url)
        self.base = f"{parts.scheme}://{parts.netloc}"
        self.port = parts.port or 80

    @property
    def pid(self) -> int:
        return self.console.proc.pid

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
        """Status and body of a plain HTTP GET (no cookie)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", path, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.read().decode(errors="replace")
        finally:
            conn.close()

    def sessions(self) -> list[int]:
        """One pid per tab console this server runs (its shell, or the console itself)."""
        return [pid for pid in _children(self.pid) if SESSION_MODULE in _cmdline(pid)]

    def descendants(self) -> list[int]:
        """Every process this server started, at any depth."""
        found: list[int] = []
        frontier = [self.pid]
        while frontier:
            children = _children(frontier.pop())
            found += children
            frontier += children
        return found

    def stop(self) -> int:
        """SIGTERM, the way a user stops it; its exit code."""
        self.console.proc.send_signal(signal.SIGTERM)
        return self.console.wait_exit()


WebFactory = Callable[..., WebServer]


@pytest.fixture
def start_web(own_redis: Any, tmp_path: Path) -> Iterator[WebFactory]:
    """``start_web(cwd, *extra)`` → a running ``ateam console --web --port 0``."""
    started: list[ConsoleProcess] = []

    def start(cwd: Path, *extra: str) -> WebServer:
        stderr_path = tmp_path / f"web-{len(started)}.stderr"
        args = ateam_cmd("console", "--web", "--port", "0", "--redis", own_redis.url, *extra)
        with stderr_path.open("wb") as err:
            proc = subprocess.Popen(
                args,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=subprocess_env(),
            )
        console = ConsoleProcess(proc, stderr_path)
        started.append(console)
        return WebServer(console)

    yield start
    for console in started:
        if console.proc.poll() is None:
            console.kill9()
        if console.proc.stdout is not None:
            console.proc.stdout.close()


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    """Headless Debian Chromium; missing, it fails the test with what to install."""
    for path in (CHROMIUM, CHROMEDRIVER):
        assert path.exists(), f"{path} is missing: apt-get install -y chromium chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def page_text(driver: WebDriver) -> str:
    return str(driver.find_element(By.TAG_NAME, "body").text)


def wait_page(driver: WebDriver, text: str, timeout: float = START_TIMEOUT_S) -> str:
    """Until the page shows ``text`` (the terminal redraws on its own: nothing to wait on)."""

    def shows() -> str | None:
        page = page_text(driver)
        return page if text in page else None

    try:
        return wait_for(shows, timeout, f"the page to show {text!r}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the page shows:\n{page_text(driver)}") from None


def type_line(driver: WebDriver, line: str) -> None:
    """Type into the terminal (xterm.js reads keys from its hidden textarea)."""
    terminal = driver.find_element(By.CSS_SELECTOR, "textarea.xterm-helper-textarea")
    terminal.send_keys(line + Keys.ENTER)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                # The parent pid is the 2nd field after the command, which is in parentheses.
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


# --- tests ------------------------------------------------------------------------------------


def test_a_browser_tab_attaches_and_sees_the_echo(
    tmp_path: Path,
    start_agent: AgentFactory,
    start_web: WebFactory,
    browser: WebDriver,
    bus: Bus,
) -> None:
    project = write_project(tmp_path / "proj", "hello", delay_ms=1)
    start_agent(AGENT, cwd=project)
    token_file = tmp_path / "token"
    web = start_web(project, "--token-file", str(token_file))
    assert token_file.read_text().strip() == web.token
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600

    # Without the token nothing is served and no console starts.
    upgrade = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    }
    for path, headers in (
        ("/", None),
        ("/?token=not-the-token", None),
        ("/static/js/textual.js", None),
        ("/ws?width=80&height=24", upgrade),
    ):
        status, body = web.get(path, headers)
        assert status == 401, (path, status, body)
        assert body.startswith("error [unauthorized]:") and body.count("\n") == 1, body
    assert web.descendants() == []

    # With it: the token leaves the address bar for a cookie, and the tab is a console.
    browser.get(web.url)
    wait_page(browser, "connected")
    assert "token" not in browser.current_url
    cookies = {cookie["name"]: cookie for cookie in browser.get_cookies()}
    assert cookies[f"ateam-console-{web.port}"]["httpOnly"] is True
    assert len(web.sessions()) == 1

    type_line(browser, f"/attach {AGENT}")
    wait_page(browser, f"attached to {AGENT} as its writer")
    type_line(browser, "hello from a browser")
    wait_page(browser, "echo: hello from a browser")
    owner = KEYS.owner(AGENT)
    assert bus.client.exists(owner)
    if os.environ.get("ATEAM_UPDATE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(SCREENSHOT))

    # A browser cannot continue in plain mode.
    type_line(browser, "/ui panes off")
    wait_page(browser, "error [bad_request]: /ui: a browser console stays in panes mode")

    # Another tab is another console, with its own ownership: refused like a terminal's.
    first = browser.current_window_handle
    browser.switch_to.new_window("tab")
    browser.get(f"{web.base}/")  # the cookie, not the token, lets it in
    wait_page(browser, "connected")
    assert len(web.sessions()) == 2
    type_line(browser, f"/attach {AGENT}")
    wait_page(browser, "error [ownership.denied]")
    browser.close()
    browser.switch_to.window(first)
    wait_for(lambda: len(web.sessions()) == 1, 10, "the closed tab's console to end")

    # Stopping the server ends the tab's console, which lets go of the agent.
    assert web.stop() == 0
    assert web.descendants() == []
    wait_for(lambda: not bus.client.exists(owner), 10, f"{AGENT}'s owner to be released")


def test_read_only_tabs_only_watch(
    tmp_path: Path,
    start_agent: AgentFactory,
    start_web: WebFactory,
    browser: WebDriver,
    bus: Bus,
) -> None:
    project = write_project(tmp_path / "proj", "hello", delay_ms=1)
    start_agent(AGENT, cwd=project)
    web = start_web(project, "--read-only")
    browser.get(web.url)
    wait_page(browser, "connected")

    type_line(browser, f"/attach {AGENT}")
    wait_page(browser, "error [ownership.denied]: /attach is refused")
    type_line(browser, "let me in")
    wait_page(browser, "error [ownership.denied]: input is refused")
    type_line(browser, "/context post the plan changed")
    wait_page(browser, "error [ownership.denied]: /context post is refused")
    type_line(browser, f"/tail {AGENT}")  # watching is what it is for
    wait_page(browser, f"tailing {AGENT}")
    assert not bus.client.exists(KEYS.owner(AGENT))
    assert bus.task_end_list(AGENT) == []


def test_bad_command_lines_are_one_line_errors(tmp_path: Path, redis_url: str) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    busy = str(taken.getsockname()[1])
    cases = [
        (["--web", "--port", "99999"], "error [bad_request]: --port 99999"),
        (["--web", "--port", "http"], "error [bad_request]: --port http"),
        (["--web", "--port", busy], f"error [bad_request]: cannot listen on 127.0.0.1:{busy}"),
        (["--read-only"], "go with --web"),
        (["--web", "--no-ui"], "--no-ui and --panes do not go with it"),
        (["--web", "--port", "0", "--token-file", str(tmp_path / "no" / "dir")], "--token-file"),
    ]
    try:
        for args, text in cases:
            done = run_ateam("console", "--redis", redis_url, *args, cwd=tmp_path)
            assert done.returncode == 4, (args, done.stderr)
            line = done.stderr.strip()
            assert "\n" not in line and text in line and "Traceback" not in line, (args, line)
    finally:
        taken.close()


def test_another_host_is_told_tls_belongs_in_a_proxy(tmp_path: Path, start_web: WebFactory) -> None:
    local = start_web(tmp_path)
    assert local.stop() == 0
    assert "warning" not in local.console.stderr_path.read_text()
    wide = start_web(tmp_path, "--host", "0.0.0.0")
    assert wide.get("/")[0] == 401
    assert wide.stop() == 0
    (warning,) = wide.console.stderr_path.read_text().splitlines()
    assert "warning: listening on 0.0.0.0" in warning and "TLS reverse proxy" in warning


def test_a_token_file_is_read_if_it_exists_else_written_and_it_says_which(
    tmp_path: Path, start_web: WebFactory, redis_url: str
) -> None:
    token_file = tmp_path / "web.token"
    first = start_web(tmp_path, "--token-file", str(token_file))
    assert first.console.wait_line(f"wrote a new token to {token_file} (mode 0600)")
    assert token_file.read_text().strip() == first.token
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert first.stop() == 0
    # Started again with the same file: the same token, so a bookmark keeps working.
    again = start_web(tmp_path, "--token-file", str(token_file))
    assert again.console.wait_line(f"read the token from {token_file}")
    assert again.token == first.token
    assert again.get(f"/?token={first.token}")[0] in (200, 302, 303)
    assert again.stop() == 0
    # A file that holds no usable token is refused in one line, and left alone.
    token_file.write_text("short\n")
    done = run_ateam(
        "console", "--web", "--redis", redis_url, "--port", "0", "--token-file", str(token_file),
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 4
    assert "error [bad_request]: --token-file" in done.stderr and "Traceback" not in done.stderr
    assert token_file.read_text() == "short\n"
