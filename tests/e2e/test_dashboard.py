"""The dashboard and the comparison report in a real browser (Playwright driving
Debian's Chromium, headless; no browser is ever downloaded).

Skipped, saying why, where Playwright's Python package or /usr/bin/chromium
is missing (CI installs both).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corral.api import dashboard
from corral.cli import app
from corral.testing.service_process import ServiceProcess
from tests.runtime.harness import PY, TOKENS

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

playwright = pytest.importorskip(
    "playwright.sync_api", reason="Playwright's Python package is not installed"
)
if shutil.which(CHROMIUM) is None:
    pytest.skip(f"no browser at {CHROMIUM} (Debian's chromium package)", allow_module_level=True)


@pytest.fixture
def browser() -> Iterator[Any]:
    with playwright.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceProcess]:
    made = ServiceProcess(tmp_path, "fifo", users=TOKENS, stop_grace=2)
    made.start()
    yield made
    made.close()


def sleeper(seconds: float, name: str, gpus: int = 1) -> dict[str, Any]:
    command = [PY, "-c", f"import time; time.sleep({seconds})"]
    return {"command": command, "gpus": gpus, "name": name}


def test_a_user_logs_in_watches_jobs_live_and_cancels_their_own(browser, service) -> None:
    bob = service.client.__class__(service.url, TOKENS["bob"])
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(service.url + "/")
    assert "token" not in page.url
    page.get_by_label("API token").fill(TOKENS["alice"])
    page.get_by_role("button", name="Log in").click()
    page.get_by_text("alice", exact=True).first.wait_for()
    assert "token" not in page.url and TOKENS["alice"] not in page.url

    # jobs submitted through the API appear, and their state changes live
    blocker = service.client.submit(sleeper(2, "short", gpus=4))["id"]
    mine = service.client.submit(sleeper(60, "mine"))["id"]
    theirs = bob.submit(sleeper(60, "theirs"))["id"]
    row = page.locator(f"tr[data-job='{mine}']")
    row.get_by_text("PENDING").wait_for(timeout=10_000)
    row.get_by_text("RUNNING").wait_for(timeout=20_000)  # the 4-GPU job ended, no reload
    page.locator(f"tr[data-job='{blocker}']").wait_for(state="detached", timeout=10_000)

    # another user's job: shown, without actions; one's own: cancel from the page
    other = page.locator(f"tr[data-job='{theirs}']")
    other.wait_for()
    assert other.locator("button[data-action]").count() == 0
    row.get_by_role("button", name=f"cancel job {mine}").click()
    page.locator(f"tr[data-job='{mine}']").wait_for(state="detached", timeout=10_000)
    assert service.client.job(mine)["status"] == "CANCELLED"

    # the cluster grid shows bob's job on a GPU
    page.locator(".gpu.busy", has_text=f"#{theirs}").wait_for(timeout=10_000)
    # the job page by keyboard: focus the job's button and press Enter
    page.get_by_role("button", name=f"show job {theirs}").focus()
    page.wait_for_timeout(2500)  # more than a poll: the redrawn rows keep the focus
    focused = page.evaluate("document.activeElement.getAttribute('aria-label')")
    assert focused == f"show job {theirs}", focused
    page.keyboard.press("Enter")
    page.get_by_role("heading", name=f"Job {theirs}: theirs").wait_for()
    assert "only the job's owner and admins" in page.locator("#log").inner_text()
    # every form field has a label
    unlabelled = page.evaluate(
        "[...document.querySelectorAll('input, select')]"
        ".filter(e => !e.labels || e.labels.length === 0).map(e => e.id)"
    )
    assert unlabelled == []
    # on a phone's screen the page does not scroll sideways (wide tables scroll in place)
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(1200)  # a refresh at that width
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    page.get_by_role("button", name="Log out").click()
    page.get_by_label("API token").wait_for()
    assert page.evaluate("sessionStorage.getItem('corral-token')") is None
    assert errors == []
    bob.close()


def _luminance(hex_colour: str) -> float:
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (int(hex_colour[k : k + 2], 16) / 255 for k in (1, 3, 5))
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def test_state_colours_have_enough_contrast() -> None:
    css = (dashboard.UI / "app.css").read_text()
    colours = dict(re.findall(r"--([a-z]+-(?:bg|fg)):\s*(#[0-9a-f]{6})", css))
    states = {name[:-3] for name in colours if name.endswith("-bg")}
    assert {"running", "pending", "suspended", "done", "failed"} <= states
    for state in states:
        light, dark = _luminance(colours[f"{state}-bg"]), _luminance(colours[f"{state}-fg"])
        ratio = (max(light, dark) + 0.05) / (min(light, dark) + 0.05)
        assert ratio >= 4.5, (state, ratio)  # WCAG AA for normal text


def test_the_comparison_report_opens_offline_and_its_charts_render(browser, tmp_path) -> None:
    out = tmp_path / "cmp"
    args = ["compare", "--policies", "fifo,las", "--trace", "synthetic:jobs=80,load=1.0"]
    args += ["--cluster", "uniform:2x4:V100", "--no-progress", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    context = browser.new_context(offline=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((out / "report.html").as_uri())
    lines = page.evaluate(
        "[...document.querySelectorAll('svg[data-chart]')]"
        ".map(s => s.querySelectorAll('polyline').length)"
    )
    assert lines == [2, 2, 2, 2, 2], lines  # five charts, a line per policy
    # hovering reads every policy's value under the pointer
    page.locator("#jct-cdf").scroll_into_view_if_needed()
    box = page.locator("#jct-cdf").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.5)
    readout = page.locator("#jct-cdf ~ output").inner_text()
    assert "fifo:" in readout and "las:" in readout
    assert re.search(r"^at [0-9.e+-]+ h - ", readout), readout  # the x axis' unit
    # and so does the keyboard
    page.locator("#utilisation").focus()
    page.keyboard.press("ArrowRight")
    assert "fifo:" in page.locator("#utilisation ~ output").inner_text()
    # the legend sits below the plot; its entries hide and show their series
    legend = page.locator("#jct-cdf ~ .legend")
    page.locator("#jct-cdf").scroll_into_view_if_needed()
    box = page.locator("#jct-cdf").bounding_box()
    assert legend.bounding_box()["y"] >= box["y"] + box["height"] - 1
    legend.get_by_role("button", name="las").click()
    assert not page.locator('#jct-cdf g[data-series="1"]').is_visible()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    readout = page.locator("#jct-cdf ~ output").inner_text()
    assert "fifo:" in readout and "las:" not in readout
    assert legend.get_by_role("button", name="las").get_attribute("aria-pressed") == "false"
    legend.get_by_role("button", name="las").click()
    assert page.locator('#jct-cdf g[data-series="1"]').is_visible()
    assert errors == []
    context.close()


def test_the_sweep_report_opens_offline_with_error_bars_and_readouts(browser, tmp_path) -> None:
    out = tmp_path / "sweep"
    args = ["sweep", "--policies", "fifo,las", "--loads", "0.6,1.2", "--seeds", "0..1"]
    args += ["--trace", "synthetic:jobs=60", "--cluster", "uniform:2x4:V100", "--no-progress"]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = browser.new_context(offline=True).new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((out / "report.html").as_uri())
    charts = page.locator("svg[data-chart]")
    assert charts.count() == 3
    assert page.locator("svg[data-chart] circle").count() == 12  # 2 policies x 2 loads x 3
    first = charts.first
    first.focus()
    page.keyboard.press("ArrowRight")
    readout = page.locator("svg[data-chart] ~ output").first.inner_text()
    assert "fifo:" in readout and "las:" in readout
    assert errors == []


def test_the_reports_fit_a_laptop_screen(browser, tmp_path) -> None:
    """Long settings (every option, a policy file's checksum, many variants) wrap, and a
    wide table scrolls inside its box: neither report is wider than a 1,280-px window;
    every load of a sweep is a labelled tick."""
    common = ["--trace", "synthetic:jobs=60", "--cluster", "uniform:2x4:V100", "--no-progress"]
    common += ["--policy-opt", "las.quantum=3600", "--failure-rates", "1:0.01,2-4:0.02,9-:0.03"]
    policies = ",".join(
        f"las[quantum={q},label=las-quantum-of-{q}-seconds]" for q in range(60, 600, 60)
    )
    made = [
        ("cmp", ["compare", "--policies", policies]),
        ("sweep", ["sweep", "--policies", "fifo,las", "--loads", "0.5,0.7,0.9,1.1"]),
    ]
    page = browser.new_context(offline=True, viewport={"width": 1280, "height": 800}).new_page()
    for name, args in made:
        result = CliRunner().invoke(app, [*args, *common, "--out", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        page.goto((tmp_path / name / "report.html").as_uri())
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 1280, (name, width)
    labels = page.evaluate(
        "[...document.querySelectorAll('svg[data-chart]')][0].querySelectorAll('text').length"
    )
    assert labels > 0
    ticks = page.evaluate(
        "[...[...document.querySelectorAll('svg[data-chart]')][0].querySelectorAll('text')]"
        ".map(t => t.textContent)"
    )
    assert {"0.5", "0.7", "0.9", "1.1"} <= set(ticks), ticks


def test_a_training_jobs_page_charts_its_steps_throughput_and_loss(browser, service) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    task = {"factory": "corral.examples.tasks:digits", "steps": 100_000, "kwargs": {"seed": 2}}
    job = service.client.submit({"name": "digits", "task": task, "gpus": 1})["id"]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(service.url + "/")
    page.get_by_label("API token").fill(TOKENS["alice"])
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("button", name=f"show job {job}").click()
    for chart in ("steps-chart", "throughput-chart", "loss-chart"):  # drawn live, no reload
        page.locator(f"#{chart} polyline").wait_for(state="attached", timeout=60_000)
    assert re.search(r"steps: \d+", page.locator("#steps-caption").inner_text())
    assert "steps/s now" in page.locator("#throughput-caption").inner_text()
    progress = service.client.job(job)["progress"]
    assert len(progress["times"]) >= 2
    assert progress["steps"] == sorted(progress["steps"]) and progress["steps"][-1] > 0
    assert all(loss is None or loss > 0 for loss in progress["loss"])
    service.client.action(job, "cancel")


TRAINER = """
import time
from corral.train import Session
session = Session()
for step in range(1, 100000):
    session.report(step, loss=1.0 / step)
    time.sleep(0.02)
"""


def test_usage_counts_pages_over_every_job_and_a_jobs_own_view(browser, service) -> None:
    """Usage per user and VC and counts by state and reason over every live job; the
    queue pages with its total; a job's page is a view of its own; 1,280 px wide."""
    bob = service.client.__class__(service.url, TOKENS["bob"])
    jobs = [service.client.submit(sleeper(120, f"a{k}"))["id"] for k in range(8)]
    jobs += [bob.submit({**sleeper(120, f"b{k}"), "vc": "lab"})["id"] for k in range(4)]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(service.url + "/?page_size=5")
    page.get_by_label("API token").fill(TOKENS["alice"])
    page.get_by_role("button", name="Log in").click()
    info = page.locator("#page-info")
    page.wait_for_function("document.getElementById('page-info').textContent.includes('of 12')")
    assert info.inner_text() == "jobs 1–5 of 12"
    assert page.locator("#jobs tbody tr").count() == 5
    page.get_by_role("button", name="next page").click()
    page.wait_for_function("document.getElementById('page-info').textContent.startsWith('jobs 6')")
    page.get_by_role("button", name="next page").click()
    page.wait_for_function(
        "document.getElementById('page-info').textContent === 'jobs 11–12 of 12'"
    )
    assert page.get_by_role("button", name="next page").is_hidden()
    shown = {int(r) for r in page.locator("#jobs tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.job)")}  # fmt: skip
    assert shown == set(jobs[10:])
    page.get_by_role("button", name="previous page").click()
    page.wait_for_function("document.getElementById('page-info').textContent.startsWith('jobs 6')")
    # usage over every live job, not one page: alice's 8 and bob's 4 (in VC lab)
    users = page.locator("#by-user tbody tr").evaluate_all(
        "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    counts = {u[0]: (int(u[1]) + int(u[2]), int(u[3])) for u in users}
    assert counts["alice"][0] == 8 and counts["bob"][0] == 4
    assert sum(gpus for _, gpus in counts.values()) >= 1
    vcs = page.locator("#by-vc tbody tr").evaluate_all(
        "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    assert {v[0]: int(v[1]) + int(v[2]) for v in vcs}["lab"] == 4
    assert "running" in page.locator("#counts").inner_text()
    assert "pending" in page.locator("#counts").inner_text()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    # a job's page on its own: the queue is hidden until one goes back to it
    page.get_by_role("button", name=f"show job {jobs[6]}").click()
    page.get_by_role("heading", name=f"Job {jobs[6]}: a6").wait_for()
    assert page.locator("#queue").is_hidden() and page.locator("#cluster").is_hidden()
    page.get_by_role("button", name="back to the queue").click()
    page.locator("#queue").wait_for(state="visible")
    assert page.locator("#job").is_hidden()
    assert errors == []
    for job in jobs:
        (service.client if job in jobs[:8] else bob).action(job, "cancel")
    bob.close()


SEEN = (
    "Object.defineProperty(document, 'visibilityState', {value: '%s', configurable: true});"
    "document.dispatchEvent(new Event('visibilitychange'))"
)
"""What the browser does when a tab goes out of sight, or comes back."""


def test_a_tab_out_of_sight_polls_nothing(browser, service) -> None:
    """Each open tab costs the service a share of a core; one behind another polls
    nothing, and refreshes at once when it is shown again."""
    page = browser.new_page()
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/v1/" in r.url else None)
    page.goto(service.url + "/")
    page.get_by_label("API token").fill(TOKENS["alice"])
    page.get_by_role("button", name="Log in").click()
    page.locator("#page-info").wait_for()
    page.wait_for_timeout(1500)
    assert asked  # polling
    page.evaluate(SEEN % "hidden")
    # a refresh already under way may still ask for what follows its first answers
    # (on a loaded machine, a second or so): wait until nothing has been asked for 1 s
    seen = -1
    for _ in range(5):  # (a tab that keeps polling never settles: then the check fails)
        if seen == len(asked):
            break
        seen = len(asked)
        page.wait_for_timeout(1000)
    asked.clear()
    page.wait_for_timeout(3000)
    assert asked == []
    page.evaluate(SEEN % "visible")
    page.wait_for_timeout(500)
    assert any("/v1/jobs" in url for url in asked)


def test_job_links_progress_history_axes_and_node_admin(browser, service) -> None:
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(service.url + "/")
    page.get_by_label("API token").fill(TOKENS["root"])
    page.get_by_role("button", name="Log in").click()
    page.get_by_text("root (admin)").wait_for()

    # progress and time left in the queue, for a job that reports its steps
    trainer = service.client.submit(
        {"command": [PY, "-c", TRAINER], "gpus": 1, "name": "trainer", "total_steps": 50000}
    )["id"]
    row = page.locator(f"tr[data-job='{trainer}']")
    row.get_by_text(re.compile(r"\d+ of 50000 \(\d+%\)")).wait_for(timeout=30_000)

    # a job's own address: opened from the queue, kept by a reload, shared as a link
    page.get_by_role("button", name=f"show job {trainer}").click()
    page.get_by_role("heading", name=f"Job {trainer}: trainer").wait_for()
    assert page.url.endswith(f"/jobs/{trainer}")
    page.reload()
    page.get_by_role("heading", name=f"Job {trainer}: trainer").wait_for()
    assert page.locator("#job-link").get_attribute("href") == f"/jobs/{trainer}"
    # charts with labelled axes: the steps chart's y axis says steps, its x axis time
    page.locator("#steps-chart text.y-max").wait_for(timeout=20_000)
    assert (page.locator("#steps-chart text.y-max").text_content() or "").endswith("steps")
    assert (page.locator("#util-chart text.y-max").text_content() or "").endswith("GPUs")
    page.get_by_role("button", name="back to the queue").click()
    assert page.url.rstrip("/") == service.url and page.locator("#job").is_hidden()
    page.go_back()
    page.get_by_role("heading", name=f"Job {trainer}: trainer").wait_for()
    page.get_by_role("button", name="back to the queue").click()  # (a job's page is its own)

    # the history view: ended jobs with their end, elapsed time and GPU-hours
    service.client.action(trainer, "cancel")
    done = service.client.submit(sleeper(0.5, "quick"))["id"]
    wait_for_status(service, done, "SUCCEEDED")
    page.locator("#f-state").select_option("all")
    hist = page.locator(f"tr[data-job='{done}']")
    hist.wait_for(timeout=10_000)
    page.locator("#jobs th.hist").first.wait_for(state="visible", timeout=10_000)
    # the table is redrawn on every refresh, so read the row until a whole one is seen
    cells = settled_cells(hist, lambda c: len(c) >= 4 and bool(re.search(r"\d", c[-4])))
    assert re.search(r"\d", cells[-4]) and cells[-2] != "-", cells  # ended, GPU-hours

    # an admin drains a node with a reason and resumes it; its history says so
    name = service.admin.nodes()[0]["name"]
    card = page.locator(f"div.node[data-node='{name}']")
    card.get_by_label(f"reason for {name}").fill("new PSU")
    card.get_by_role("button", name=f"drain node {name}").click()
    card.locator("h3", has_text="drained: new PSU").wait_for(timeout=10_000)
    card.locator("summary", has_text="history").click()
    card.locator("li", has_text="drained by root: new PSU").wait_for(timeout=10_000)
    card.get_by_role("button", name=f"resume node {name}").click()
    card.locator("li", has_text="resumed by root").wait_for(timeout=10_000)
    assert service.admin.nodes()[0]["state"] == "up"
    page.screenshot(path=str(service.folder / "dashboard.png"))
    assert errors == [], errors


def settled_cells(row: Any, whole: Any, timeout: float = 10.0) -> list[str]:
    """A table row's cell texts, read again until ``whole`` accepts them.

    The dashboard redraws its table on each refresh; a read that falls between
    the old row's removal and the new one's drawing sees no cells at all.
    """
    import time

    deadline = time.monotonic() + timeout
    cells: list[str] = row.locator("td").all_inner_texts()
    while not whole(cells) and time.monotonic() < deadline:
        time.sleep(0.1)
        cells = row.locator("td").all_inner_texts()
    return cells


def wait_for_status(service: ServiceProcess, job: int, status: str) -> None:
    from corral.testing.service_process import wait_for

    wait_for(lambda: service.client.job(job)["status"] == status, 60, f"job {job} {status}")


def test_logging_out_while_a_refresh_is_under_way_sends_nothing_more(browser, service) -> None:
    """A poll answered after the user logged out draws nothing and sends no further
    request (which would go without a token: a 401, and "token refused" shown to
    nobody's fault). The first poll is held until the user has logged out."""
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    untokened: list[str] = []
    page.on(
        "request",
        lambda r: (
            untokened.append(r.url)
            if "/v1/" in r.url and r.headers.get("authorization", "Bearer null") == "Bearer null"
            else None
        ),
    )
    held: list[Any] = []
    page.route("**/v1/nodes", lambda route: held.append(route))
    page.goto(service.url + "/")
    page.get_by_label("API token").fill(TOKENS["alice"])
    page.get_by_role("button", name="Log in").click()
    page.wait_for_function("() => !document.getElementById('app').hidden")
    for _ in range(50):
        if held:
            break
        page.wait_for_timeout(100)
    assert held, "the first poll never asked for the nodes"
    page.get_by_role("button", name="Log out").click()
    page.get_by_label("API token").wait_for()
    for route in held:
        route.continue_()
    page.wait_for_timeout(1500)
    assert untokened == [] and errors == [], (untokened, errors)
    assert page.locator("#login-error").inner_text() == ""
    assert page.locator("#nodes").inner_text() == ""  # nothing drawn for the next user
    assert page.evaluate("state.timer") is None  # and no polling started after the log-out
