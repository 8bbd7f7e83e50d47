"""Headless Chromium driven over the DevTools protocol (a websocket, spoken with aiohttp).

Used by the status page's browser test. `find_chromium()` finds Debian's `chromium` (and,
as root on Debian, installs it with apt-get as bin/_bootstrap.sh does for ZooKeeper);
`Chromium` starts one browser in its own session with a throw-away profile and always
kills that session's process group (the browser and its renderer, GPU and zygote
children) by the PID it started; `Page` evaluates script, takes screenshots and records
every URL the page requested and every console message it logged.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

START_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 30.0
APT_INSTALL_TIMEOUT_S = 900.0


class ChromiumError(RuntimeError):
    """The browser could not be started or did not answer; the message says why."""


def find_chromium(install: bool = True) -> tuple[str | None, str]:
    """(path of the chromium binary, "") or (None, the reason there is none)."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found, ""
    if not install:
        return None, "chromium is not installed"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None, "chromium is not installed (install Debian's `chromium` package: apt-get install chromium)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        subprocess.run(["apt-get", "install", "-y", "-qq", "-o", "DPkg::Lock::Timeout=600", "chromium"], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=APT_INSTALL_TIMEOUT_S)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        return None, f"apt-get install chromium failed: {getattr(e, 'stderr', b'') or e}"
    found = shutil.which("chromium")
    return (found, "") if found else (None, "apt-get installed chromium but no `chromium` is on PATH")


class Chromium:
    def __init__(self, binary: str, *, window: tuple[int, int] = (1280, 1100), log_path: Path | None = None):
        self.binary = binary
        self.window = window
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self._profile: str | None = None

    def start(self) -> None:
        self._profile = tempfile.mkdtemp(prefix="kafkalite-chromium-")
        args = [
            self.binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--disable-background-networking", "--mute-audio",
            f"--window-size={self.window[0]},{self.window[1]}", f"--user-data-dir={self._profile}",
            "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "about:blank",
        ]
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            if self.log_path:
                out.close()
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                raise ChromiumError(f"chromium exited with {self.proc.returncode} at start-up (log: {self.log_path})")
            if port_file.exists():
                first = port_file.read_text().split("\n", 1)[0].strip()
                if first.isdigit():
                    self.port = int(first)
                    return
            time.sleep(0.1)
        self.stop()
        raise ChromiumError(f"chromium did not open its DevTools port within {START_TIMEOUT_S:.0f} s (log: {self.log_path})")

    def stop(self) -> None:
        """Kill the browser's whole process group (its session, led by the PID started here)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            # Children outlive a killed leader only if they left its group; they did not.
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._profile:
            shutil.rmtree(self._profile, ignore_errors=True)
            self._profile = None

    def __enter__(self) -> Chromium:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def open(self, url: str) -> Page:
        """A new tab loading `url`, with the Page, Runtime, Log and Network domains on."""
        assert self.port is not None
        async with aiohttp.ClientSession() as http:
            async with http.put(f"http://127.0.0.1:{self.port}/json/new?about:blank") as r:
                if r.status != 200:
                    raise ChromiumError(f"DevTools /json/new answered {r.status}: {await r.text()}")
                target = await r.json(content_type=None)
        page = Page(target["webSocketDebuggerUrl"])
        await page.connect()
        for domain in ("Page", "Runtime", "Log", "Network"):
            await page.call(f"{domain}.enable")
        await page.navigate(url)
        return page


class Page:
    def __init__(self, ws_url: str):
        self.ws_url = ws_url
        self.requested_urls: list[str] = []
        self.console: list[str] = []
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}
        self._load = asyncio.Event()
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task | None = None

    async def connect(self) -> None:
        self._http = aiohttp.ClientSession()
        self._ws = await self._http.ws_connect(self.ws_url, max_msg_size=0)
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self._ws is not None
        try:
            async for msg in self._ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                if "id" in data:
                    fut = self._waiting.pop(data["id"], None)
                    if fut is not None and not fut.done():
                        fut.set_result(data)
                    continue
                self._on_event(data.get("method", ""), data.get("params", {}))
        finally:
            for fut in self._waiting.values():
                if not fut.done():
                    fut.set_exception(ChromiumError("the DevTools connection closed"))

    def _on_event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Page.loadEventFired":
            self._load.set()
        elif method == "Network.requestWillBeSent":
            self.requested_urls.append(params["request"]["url"])
        elif method == "Log.entryAdded":
            entry = params["entry"]
            self.console.append(f"{entry.get('level')}: {entry.get('text')}")
        elif method == "Runtime.consoleAPICalled":
            self.console.append(f"{params.get('type')}: " + " ".join(str(a.get("value")) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            self.console.append(f"exception: {params['exceptionDetails'].get('text')}")

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        assert self._ws is not None
        msg_id = next(self._ids)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting[msg_id] = fut
        await self._ws.send_str(json.dumps({"id": msg_id, "method": method, "params": params or {}}))
        async with asyncio.timeout(CALL_TIMEOUT_S):
            reply = await fut
        if "error" in reply:
            raise ChromiumError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    async def navigate(self, url: str) -> None:
        self._load.clear()
        await self.call("Page.navigate", {"url": url})
        async with asyncio.timeout(CALL_TIMEOUT_S):
            await self._load.wait()

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise ChromiumError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def screenshot(self, path: Path) -> None:
        result = await self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        await asyncio.to_thread(path.write_bytes, base64.b64decode(result["data"]))

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
