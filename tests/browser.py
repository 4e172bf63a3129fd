"""A headless Chromium driven over the DevTools protocol, for the website's page tests.

Chromium is started with `--remote-debugging-pipe`: it reads protocol messages on file
descriptor 3 and writes them on 4, each a JSON text ended by a NUL byte, so no websocket client
is needed. A `Page` records what a person would not see but a test must: console messages of
level error, uncaught exceptions, and every network request the page makes (a page read from
disk must make none outside `file://`).
"""

from __future__ import annotations

import base64
import fcntl
import json
import logging
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--mute-audio",
    "--remote-debugging-pipe",
]


def find_chromium() -> str | None:
    env = os.environ.get("SUITE_CHROMIUM")
    if env and Path(env).exists():
        return env
    for cand in CHROMIUM_CANDIDATES:
        if Path(cand).exists():
            return cand
    return shutil.which("chromium")


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless Chromium process with its own fresh profile folder."""

    def __init__(self, chromium: str | None = None, timeout_s: float = 60.0):
        exe = chromium or find_chromium()
        if exe is None:
            raise BrowserError("no Chromium found; run .ci/browser-setup.sh")
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="suite-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire_fds() -> None:  # in the child: the protocol pipes become fds 3 and 4
            a = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(3, 4),
            preexec_fn=wire_fds,
            start_new_session=True,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.send("Browser.getVersion")

    # --- protocol -------------------------------------------------------------------------
    def _write(self, msg: dict[str, Any]) -> None:
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")

    def _read_one(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                err = self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc.stderr else ""
                raise BrowserError(f"Chromium closed its protocol pipe: {err}")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None) -> dict[str, Any]:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self._write(msg)
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read_one(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_event(self, method: str, session: str, timeout_s: float | None = None) -> dict[str, Any]:
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        for i, ev in enumerate(self.events):
            if ev["method"] == method and ev.get("sessionId") == session:
                return self.events.pop(i)
        while True:
            ev = self._read_one(deadline)
            if ev.get("method") == method and ev.get("sessionId") == session:
                return ev
            if "method" in ev:
                self.events.append(ev)

    # --- pages ----------------------------------------------------------------------------
    def open(self, url: str, width: int = 1280, height: int = 900) -> "Page":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, target, session)
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                  session=session)
        page.goto(url)
        return page

    def close(self) -> None:
        try:
            self._write({"id": 0, "method": "Browser.close", "params": {}})
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
            self.proc.wait(timeout=10)
        finally:
            for fd in (self._to_child, self._from_child):
                try:
                    os.close(fd)
                except OSError:
                    pass
            if self.proc.stderr:
                self.proc.stderr.close()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Page:
    def __init__(self, browser: Browser, target: str, session: str):
        self.browser = browser
        self.target = target
        self.session = session

    def goto(self, url: str) -> None:
        self.browser.send("Page.navigate", {"url": url}, session=self.session)
        self.browser.wait_event("Page.loadEventFired", self.session)

    def _mine(self) -> list[dict[str, Any]]:
        # drain what is already buffered, then keep this page's events
        return [e for e in self.browser.events if e.get("sessionId") == self.session]

    def eval(self, expression: str) -> Any:
        res = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                                session=self.session)
        if "exceptionDetails" in res:
            raise BrowserError(f"evaluating {expression!r}: {res['exceptionDetails'].get('text')}")
        return res["result"].get("value")

    def text(self) -> str:
        return self.eval("document.body.innerText")

    def console_errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads this page reported."""
        self.eval("0")  # let queued events arrive
        out: list[str] = []
        for ev in self._mine():
            m, p = ev["method"], ev["params"]
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description")))
                                                  for a in p.get("args", [])))
            elif m == "Runtime.exceptionThrown":
                out.append("exception: " + p["exceptionDetails"].get("text", ""))
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append("log: " + p["entry"].get("text", ""))
            elif m == "Network.loadingFailed":
                out.append("load failed: " + p.get("errorText", ""))
        return out

    def requested_urls(self) -> list[str]:
        self.eval("0")
        return [ev["params"]["request"]["url"] for ev in self._mine()
                if ev["method"] == "Network.requestWillBeSent"]

    def screenshot(self, path: Path, full_page: bool = True, band: tuple[int, int] | None = None) -> Path:
        """A PNG of the page: all of it, the viewport, or the vertical `band` (top, height) in CSS px."""
        params: dict[str, Any] = {"format": "png"}
        if band is not None:
            width = self.eval("document.documentElement.scrollWidth")
            params["captureBeyondViewport"] = True
            params["clip"] = {"x": 0, "y": band[0], "width": width, "height": band[1], "scale": 1}
        elif full_page:
            params["captureBeyondViewport"] = True
            metrics = self.browser.send("Page.getLayoutMetrics", session=self.session)
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"],
                              "height": min(size["height"], 16000), "scale": 1}
        data = self.browser.send("Page.captureScreenshot", params, session=self.session)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
