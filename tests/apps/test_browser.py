"""End to end in a real headless Chromium: sign in, open a suggestion, approve it (twice, quickly),
run the worker, and see it executed; screenshots of the queue and the suggestion page on the way.

The app runs as ``streamlit run`` in a subprocess on a temporary SQLite database seeded by the real
service. Needs Debian ``chromium`` + ``chromium-driver`` and ``selenium``; skips without them unless
``TRANSFERLAB_REQUIRE_BROWSER=1`` (CI), which fails instead. ``TRANSFERLAB_SCREENSHOTS=1`` writes the
screenshots to ``docs/images/`` (the README's), else to the test's tmp dir.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from transferlab.apps import REVIEW_APP
from transferlab.human_review import auth
from transferlab.human_review.gateway import MarketGateway
from transferlab.human_review.service import ReviewService
from transferlab.human_review.store import ReviewStore
from transferlab.human_review.worker import run_worker
from transferlab.simulator.world_config import WorldConfig

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
REPO = Path(__file__).resolve().parents[2]
WAIT_S = 30.0


def _missing() -> str | None:
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install -e '.[dev]')"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not path.exists():
            return f"{path} not found (apt-get install {package})"
    return None


@pytest.fixture(scope="module", autouse=True)
def _browser_available() -> None:
    reason = _missing()
    if reason is None:
        return
    if os.environ.get("TRANSFERLAB_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason}, and TRANSFERLAB_REQUIRE_BROWSER=1 requires the browser test", pytrace=False)
    pytest.skip(f"{reason} (set TRANSFERLAB_REQUIRE_BROWSER=1 to fail instead)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, ReviewService, int]:
    """The database URL, its service, and a low-risk suggestion ``sam`` submitted for rita to approve."""
    monkeypatch.setattr(auth, "ARGON2_MEMORY_KIB", 64)  # the hash carries its work factor: the app checks it
    monkeypatch.setattr(auth, "ARGON2_TIME_COST", 1)
    url = f"sqlite:///{tmp_path / 'review.db'}"
    svc = ReviewService(ReviewStore(url))
    ada = svc.add_user(None, "ada", "pass-word-ada", "admin")
    svc.add_user(ada, "rita", "pass-word-rita", "reviewer")
    svc.add_user(ada, "vic", "pass-word-vic", "viewer")
    svc.add_user(ada, "alma", "pass-word-alma", "approver")
    sam = svc.add_user(ada, "sam", "pass-word-sam", "reviewer")
    sid = svc.submit(
        sam,
        {
            "action": {"discount": 0.05, "push_hour": 20, "segment": "loyal", "budget": 30.0},
            "reasoning": "Loyal customers answered small evening reminders well in the last 8 weeks. "
            "<script>alert(1)</script> stays text.",
            "confidence": 0.8,
            "risk": "low",
            "evidence": {
                "predicted": {
                    "orders": {"estimate": 42.0, "low": 30.0, "high": 55.0},
                    "profit": {"estimate": 18.0, "low": 4.0, "high": 31.0},
                    "discount_cost": {"estimate": 9.0, "low": 6.0, "high": 12.0},
                },
                "uplift": {
                    "no_campaign": {
                        "orders": {"estimate": 6.0, "low": 1.0, "high": 11.0},
                        "profit": {"estimate": 7.5, "low": -2.0, "high": 15.0},
                        "discount_cost": {"estimate": 9.0, "low": 6.0, "high": 12.0},
                    },
                    "current": {
                        "orders": {"estimate": 2.0, "low": -3.0, "high": 7.0},
                        "profit": {"estimate": 3.25, "low": -5.0, "high": 11.0},
                        "discount_cost": {"estimate": 4.0, "low": 0.0, "high": 8.0},
                    },
                },
                "ope": {
                    "estimator": "dr",
                    "estimate": 1.2,
                    "low": 0.7,
                    "high": 1.8,
                    "trusted": True,
                    "ess": 95.0,
                    "ess_share": 0.26,
                    "behaviour": 1.05,
                },
                "policy": "cql",
            },
        },
    )
    return url, svc, sid


@pytest.fixture
def server(seeded: tuple[str, ReviewService, int], tmp_path: Path) -> Iterator[str]:
    """``streamlit run`` on the seeded database; its base URL."""
    port = _free_port()
    env = {**os.environ, "TRANSFERLAB_REVIEW_DB": seeded[0], "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    log = (tmp_path / "streamlit.log").open("wb")
    cmd = [sys.executable, "-m", "streamlit", "run", str(REVIEW_APP), "--server.headless", "true"]
    cmd += ["--server.port", str(port), "--server.address", "127.0.0.1", "--server.fileWatcherType", "none"]
    cmd += ["--client.toolbarMode", "viewer"]
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"streamlit did not start:\n{(tmp_path / 'streamlit.log').read_text()[-3000:]}")
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture
def driver() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(arg)
    options.binary_location = str(CHROMIUM)
    browser = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    browser.set_window_size(1280, 900)
    try:
        yield browser
    finally:
        browser.quit()


def _screenshot_dir(tmp_path: Path) -> Path:
    if os.environ.get("TRANSFERLAB_SCREENSHOTS") == "1":
        out = REPO / "docs" / "images"
        out.mkdir(parents=True, exist_ok=True)
        return out
    return tmp_path


def _wait_text(browser: Any, text: str) -> None:
    """Wait until ``text`` is on the page and Streamlit is not running the script any more."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def ready(b: Any) -> bool:
        running = b.find_elements(By.CSS_SELECTOR, '[data-testid="stStatusWidget"]')
        return text in b.find_element(By.TAG_NAME, "body").text and not running

    try:
        WebDriverWait(browser, WAIT_S, poll_frequency=0.2).until(ready)
    except Exception:
        body = browser.find_element(By.TAG_NAME, "body").text
        pytest.fail(f"{text!r} never showed; the page says:\n{body[-2000:]}")


def _find(browser: Any, xpath: str) -> Any:
    """The element at ``xpath`` once it is on the page and clickable."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, WAIT_S, poll_frequency=0.2).until(
        ec.element_to_be_clickable((By.XPATH, xpath))
    )


def _button(browser: Any, label: str) -> Any:
    return _find(browser, f'//button[normalize-space(.)="{label}"]')


def _nav(browser: Any, page: str) -> None:
    _find(browser, f'//a[@data-testid="stSidebarNavLink"][contains(@href, "/{page}")]').click()


@pytest.mark.slow
def test_sign_in_approve_execute_in_chromium(
    server: str, driver: Any, seeded: tuple[str, ReviewService, int], tmp_path: Path
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    _url, svc, sid = seeded
    shots = _screenshot_dir(tmp_path)
    driver.get(server)
    _wait_text(driver, "Review: sign in")
    _find(driver, '//input[@aria-label="Name"]').send_keys("rita")
    _find(driver, '//input[@aria-label="Password"]').send_keys("pass-word-rita")
    _button(driver, "Sign in").click()
    _wait_text(driver, "Review queue")
    _wait_text(driver, "Batch approval")
    time.sleep(1.0)  # let the table's canvas paint before the screenshot
    driver.save_screenshot(str(shots / "review_queue.png"))

    _button(driver, "Open suggestion").click()
    _wait_text(driver, f"#{sid}: pending")
    _wait_text(driver, "<script>alert(1)</script> stays text.")  # shown literally, never run
    _wait_text(driver, "against 1.05 for what the shop does now")  # the OPE verdict in words
    driver.set_window_size(1280, 2100)  # the whole page: evidence, decision, action, charts
    time.sleep(1.5)  # the charts
    driver.save_screenshot(str(shots / "review_suggestion.png"))
    driver.set_window_size(1280, 900)

    approve = _button(driver, "Approve")
    ActionChains(driver).double_click(approve).perform()  # two clicks, as fast as a person can
    _wait_text(driver, f"#{sid}: approved")
    admin = svc.authenticate("ada", "pass-word-ada")
    approvals = [r for r in svc.audit(admin, sid) if r.to_state == "approved"]
    assert [r.actor for r in approvals] == ["rita"]  # one decision recorded, whatever the clicks

    gateway = MarketGateway.create(tmp_path / "market", WorldConfig(n_customers=100))
    stats = run_worker(svc, gateway, "browser-test", actor=admin, once=True)
    assert stats.executed == 1
    _nav(driver, "executed")
    _wait_text(driver, "Outcomes come back")
    assert svc.get(admin, sid).state == "executed" and svc.get(admin, sid).executions == 1
    _wait_text(driver, f"#{sid} executed")


#: Each page's title, as the page shows it (the browser waits for it before the screenshot).
PAGE_TITLES = {
    "queue": "Review queue",
    "suggestion": "Suggestion",
    "executed": "Executed",
    "audit": "Audit log",
    "results": "Predicted vs real",
    "reports": "Rate reports",
    "experiments": "Experiments",
}
#: Each page's name in the sidebar (review_app.TITLES).
NAV_TITLES = {
    "queue": "Queue",
    "suggestion": "Suggestion",
    "executed": "Executed",
    "audit": "Audit log",
    "results": "Results",
    "reports": "Rate reports",
    "experiments": "Experiments",
}
USER_OF = {"viewer": "vic", "reviewer": "rita", "approver": "alma", "admin": "ada"}


@pytest.mark.slow
def test_every_page_for_every_role_in_chromium(
    server: str, driver: Any, seeded: tuple[str, ReviewService, int], tmp_path: Path
) -> None:
    """Each role signs in and opens every page it is shown: each renders without an exception, and its
    screenshot is kept (``docs/images/pages/<role>_<page>.png`` with TRANSFERLAB_SCREENSHOTS=1)."""
    from selenium.webdriver.common.by import By

    from transferlab.human_review import views

    shots = _screenshot_dir(tmp_path) / "pages"
    shots.mkdir(parents=True, exist_ok=True)
    for role, name in USER_OF.items():
        driver.get(server)  # a new session: the sign-in page
        _wait_text(driver, "Review: sign in")
        _find(driver, '//input[@aria-label="Name"]').send_keys(name)
        _find(driver, '//input[@aria-label="Password"]').send_keys(f"pass-word-{name}")
        _button(driver, "Sign in").click()
        _wait_text(driver, f"{name} ({role})")
        for page in [*views.pages_for(role), "experiments"]:  # experiments: every role's, after the rest
            link = f'//a[@data-testid="stSidebarNavLink"][contains(normalize-space(.), "{NAV_TITLES[page]}")]'
            _find(driver, link).click()  # by its name: the first page's link has no path
            _wait_text(driver, PAGE_TITLES[page])
            time.sleep(0.8)  # tables and charts paint after the script ends
            errors = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
            assert not errors, f"{role} on {page}: {errors[0].text[:500]}"
            driver.save_screenshot(str(shots / f"{role}_{page}.png"))
