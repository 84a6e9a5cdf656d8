"""Remake the dashboard's screenshots in this folder: a service on virtual GPUs,
a few jobs (one that reports its training progress), Debian's Chromium.

    python docs/images/screenshots.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from corral.testing.service_process import ServiceProcess, wait_for

HERE = Path(__file__).parent
TOKENS = {"alice": "alice-token-1", "bob": "bob-token-12", "root": "root-token-1"}
TRAINER = """
import time
from corral.train import Session
session = Session()
for step in range(1, 100000):
    session.report(step, loss=2.0 / step ** 0.5)
    time.sleep(0.02)
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        service = ServiceProcess(Path(scratch), "las", {"quantum": 60}, users=TOKENS)
        service.start()
        try:
            client = service.client
            bob = client.__class__(service.url, TOKENS["bob"])
            trainer = client.submit(
                {"command": [sys.executable, "-c", TRAINER], "gpus": 2, "name": "resnet",
                 "total_steps": 60000, "vc": "vision"}  # fmt: skip
            )["id"]
            for k in range(3):
                sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
                bob.submit({"command": sleep, "gpus": 1 + k % 2, "name": f"bert-{k}", "vc": "nlp"})
            wait_for(lambda: client.job(trainer)["steps"] > 200, 60, "progress")
            time.sleep(15)  # a few heartbeats for the charts
            with sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path="/usr/bin/chromium", args=["--no-sandbox", "--headless"]
                )
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(service.url + "/")
                page.get_by_label("API token").fill(TOKENS["root"])
                page.get_by_role("button", name="Log in").click()
                page.get_by_text("root (admin)").wait_for()
                page.wait_for_timeout(2500)
                page.screenshot(path=str(HERE / "dashboard.png"))
                page.goto(f"{service.url}/jobs/{trainer}")
                page.get_by_role("heading", name=f"Job {trainer}: resnet").wait_for()
                page.wait_for_timeout(2500)
                # the job's facts, charts, attempts and events (its spec, which names
                # this machine's interpreter, is left out)
                top = page.locator("#job").bounding_box()
                end = page.locator("#log-attempt").bounding_box()
                assert top is not None and end is not None
                clip = {"x": top["x"], "y": top["y"], "width": top["width"],
                        "height": end["y"] - top["y"] - 4}  # fmt: skip
                page.screenshot(path=str(HERE / "job.png"), clip=clip, full_page=True)
                browser.close()
        finally:
            service.close()


if __name__ == "__main__":
    main()
