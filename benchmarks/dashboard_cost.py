"""What one open dashboard tab costs the service, in CPU.

Starts ``corral serve`` (fifo, 4 virtual GPUs) with ``--jobs`` jobs queued
(4 running, the rest waiting), measures the service process's CPU time over
``--seconds`` with no browser, then with one logged-in dashboard tab (Debian's
Chromium, headless, driven by Playwright), and prints each as a share of one
core and the tab's own cost (the difference), then again with the tab out of
sight (it stops polling). The target is under 2% of a core per open tab.

    python benchmarks/dashboard_cost.py [--jobs 2000] [--seconds 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from corral.testing.service_process import ServiceProcess, kill_open_attempts

CHROMIUM = "/usr/bin/chromium"
HIDE = (
    "Object.defineProperty(document, 'visibilityState', {value: 'hidden', configurable: true});"
    "document.dispatchEvent(new Event('visibilitychange'))"
)
"""What the browser does when the tab goes out of sight (another tab in front)."""
TOKENS = {"alice": "alice-token-1", "root": "root-token-1"}


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def share(pid: int, seconds: float) -> float:
    """The share of one core the process used over the next ``seconds``."""
    before, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / (time.monotonic() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=30.0)
    opts = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as scratch:
        service = ServiceProcess(
            Path(scratch), "fifo", users=TOKENS, gpus=[{"type": "V100", "count": 4}], tick=0.5
        )
        service.start()
        try:
            sleeper = {"command": [sys.executable, "-c", "import time; time.sleep(3600)"]}
            service.client.submit_many([sleeper | {"name": f"j{k}"} for k in range(opts.jobs)])
            time.sleep(3)  # the first ones started
            assert service.proc is not None
            pid = service.proc.pid
            idle = share(pid, opts.seconds)
            with sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path=CHROMIUM, args=["--no-sandbox", "--headless"]
                )
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(service.url + "/")
                page.get_by_label("API token").fill(TOKENS["alice"])
                page.get_by_role("button", name="Log in").click()
                page.locator("#page-info").wait_for()
                time.sleep(3)
                watched = share(pid, opts.seconds)
                page.evaluate(HIDE)
                time.sleep(2)
                hidden = share(pid, opts.seconds)
                browser.close()
        finally:
            service.stop()
            kill_open_attempts(service.attempts())  # (jobs outlive the service by design)
    print(f"{opts.jobs:,} jobs queued, {opts.seconds:.0f} s each")
    print(f"  service, no tab open    : {100 * idle:5.1f}% of a core")
    print(f"  service, one tab open   : {100 * watched:5.1f}% of a core")
    print(f"  one open tab costs      : {100 * (watched - idle):5.1f}% of a core (target < 2%)")
    print(f"  the tab out of sight    : {100 * (hidden - idle):5.1f}% of a core")


if __name__ == "__main__":
    main()
