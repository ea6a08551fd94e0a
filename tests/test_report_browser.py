"""``esa report`` pages in a real browser (Debian's headless chromium through selenium).

For each kind of result a small real run of the command (in process, through
``simulations.cli.main``) is rendered, loaded as ``file://``, and checked: no console error,
every section present, every SVG plot laid out with a non-zero size. A screenshot of each
goes to the test's temporary directory, or to ``docs/report-<kind>.png`` with
``ESA_REPORT_SCREENSHOTS=docs``.

Skipped only when ``/usr/bin/chromium`` is missing outside CI; in CI (``CI`` set) a missing
browser is a failure.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simulations import cli
from simulations.report import SECTIONS, write_report

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ROOT = Path(__file__).resolve().parent.parent

if not CHROMIUM.exists() and not os.environ.get("CI"):
    pytest.skip(
        "/usr/bin/chromium is missing (apt-get install chromium chromium-driver); "
        "CI installs it and runs these tests",
        allow_module_level=True,
    )

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402

#: an attribute that would make the browser fetch something
_FETCH = re.compile(r"""(?:src|href|url)\s*[=(]\s*["']?\s*(?:https?:|//)""", re.IGNORECASE)


def _run_json(argv: list[str]) -> dict[str, Any]:
    """The JSON object a real ``esa`` command prints, run in process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(argv)
    assert code == 0, argv
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    assert CHROMIUM.exists(), "CI must install chromium: /usr/bin/chromium is missing"
    assert CHROMEDRIVER.exists(), "CI must install chromium-driver: /usr/bin/chromedriver"
    profile = tmp_path_factory.mktemp("chromium-profile")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1100,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # The system chromedriver, given explicitly: selenium-manager downloads nothing.
    drv = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield drv
    finally:
        drv.quit()


#: a small real run of each command, as ``esa`` arguments ({out}: the test's directory)
RUNS: dict[str, str] = {
    "simulate": "simulate --protocol hist_kr --n 2000 --crypto ideal --json",
    "audit": "audit --protocol hist_kr --n 2000 --epsilon 1 --domain 8 --json",
    "amplify": "amplify --epsilon-local 3 --n 5000 --domain 4 --json",
    "experiments": "experiments counting --quick --protocols cnt_rr --repeats 2 "
    "--out {out}/exp --json",
}


@pytest.mark.parametrize("kind", list(RUNS))
def test_report_renders_in_chromium(kind: str, driver: Any, tmp_path: Path) -> None:
    result = _run_json(RUNS[kind].format(out=tmp_path).split())
    page = tmp_path / f"report-{kind}.html"
    write_report(result, page)
    html = page.read_text(encoding="utf-8")
    assert "<script" not in html.lower()
    assert not _FETCH.search(html), _FETCH.search(html)
    driver.get_log("browser")  # drop what an earlier page logged
    driver.get(page.as_uri())
    assert driver.execute_script("return document.readyState") == "complete"
    severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert severe == [], severe
    kind_attr = driver.execute_script("return document.querySelector('.esa-report').dataset.kind")
    assert kind_attr == kind
    for sid, _ in SECTIONS:
        assert driver.find_elements("id", sid), f"section #{sid} missing"
    sizes = driver.execute_script(
        "return Array.from(document.querySelectorAll('svg.plot'))"
        ".map(s => { const r = s.getBoundingClientRect(); return [r.width, r.height]; })"
    )
    assert sizes, "no plot in the page"
    assert all(w > 50 and h > 50 for w, h in sizes), sizes
    shot = tmp_path / f"report-{kind}.png"
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1100, min(int(height) + 40, 6000))
    assert driver.save_screenshot(str(shot))
    driver.set_window_size(1100, 900)
    if os.environ.get("ESA_REPORT_SCREENSHOTS") == "docs":
        shutil.copyfile(shot, ROOT / "docs" / f"report-{kind}.png")
