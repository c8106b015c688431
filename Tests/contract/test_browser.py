"""The browser flow with a real browser: headless Chromium signs in at django-oauth-toolkit
(its login page, then its consent page) and is redirected to the host's loopback listener.

test_django.py plays the same flow with a scripted HTTP user; only a real browser shows that
DOT's forms work with real cookies and CSRF, that the consent page's buttons do what they say,
that the redirect reaches the listener on the IP literal 127.0.0.1, and which page the user is
left looking at. Chromium and chromedriver come from Debian (`make deps` installs them): the
test never skips, as a skipped browser test would hide a broken sign-in.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import urllib.parse
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from authbridge_testkit import TIMEOUT
from authbridge_testkit.dot_auth import PASSWORD, USER, DotAuthServer, dot_fixture

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
USER_CANCELLED = -32005  # UserCancelled in bridge-spec/openrpc.json


dot = dot_fixture("module")


@pytest.fixture
def chromium(tmp_path):
    """Headless Chromium with a fresh profile (no cookies from another test), always quit."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    options.add_argument("--headless=new")
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # Chromium refuses to run its sandbox as root
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    # Only the test's own servers: no update checks or other traffic of Chromium's own.
    options.add_argument("--disable-background-networking")
    options.add_argument("--disable-component-update")
    # An explicit driver path: Selenium Manager (which would download one) never runs.
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(TIMEOUT)
    try:
        yield driver
    finally:
        driver.quit()


def redacted(url: str) -> str:
    """`url` without the value of an authorization code (fit for messages and files)."""
    parts = urllib.parse.urlsplit(url)
    query = [(name, "…" if name == "code" else value) for name, value in urllib.parse.parse_qsl(parts.query)]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


@contextlib.contextmanager
def evidence_on_failure(driver, folder: Path):
    """Any failure inside the block saves what the browser showed (screenshot, page source,
    URL) into `folder` and names it in the assertion message."""
    try:
        yield
    except Exception as error:
        folder.mkdir(exist_ok=True)
        try:
            driver.save_screenshot(str(folder / "screenshot.png"))
            (folder / "page.html").write_text(f"<!-- {redacted(driver.current_url)} -->\n{driver.page_source}")
        except WebDriverException as broken:
            (folder / "page.html").write_text(f"<!-- the browser could not be read: {broken.msg} -->\n")
        text = error.msg if isinstance(error, WebDriverException) else str(error)  # not chromedriver's stack
        raise AssertionError(f"{text}\n    browser evidence (screenshot.png, page.html): {folder}") from error


def wait_for(driver, condition, what: str):
    """WebDriverWait bounded by the suite's TIMEOUT, with a message that says what was awaited."""
    return WebDriverWait(driver, TIMEOUT).until(condition, f"timed out after {TIMEOUT} s waiting for {what}")


def start_browser_sign_in(start_host, oidc_plugin_dir, server: DotAuthServer):
    """A host with a discovery-configured profile for DOT's consent client, and a browser-flow
    sign-in waiting at its listener. Returns the host, the pending request's id, the URL to open
    and the listener's origin."""
    settings = {"issuer": f"{server.base}/o", "clientId": "authbridge-consent", "scopes": ["openid", "read"]}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}})
    pending = host.send_request("requestOAuthTokens", {"provider": "dot", "flow": "browser"})
    opened = host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "openUrl")
    host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "waiting")
    assert opened["url"].startswith(server.authorize_prefix), "the sign-in URL is not DOT's authorize endpoint"
    redirect = urllib.parse.urlsplit(dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(opened["url"]).query))["redirect_uri"])
    assert (redirect.scheme, redirect.hostname, redirect.path) == ("http", "127.0.0.1", "/callback"), "RFC 8252 loopback redirect"
    return host, pending, opened["url"], f"http://127.0.0.1:{redirect.port}"


def log_in_to_consent_page(driver, url: str) -> None:
    """What the user does first: open the URL, sign in as ada on DOT's login form, and arrive
    at DOT's consent page ("Authorize AuthBridge tests (authbridge-consent)?")."""
    driver.get(url)
    wait_for(driver, EC.presence_of_element_located((By.NAME, "username")), "DOT's login form").send_keys(USER)
    driver.find_element(By.NAME, "password").send_keys(PASSWORD)
    driver.find_element(By.CSS_SELECTOR, "form button").click()
    wait_for(driver, EC.presence_of_element_located((By.ID, "authorizationForm")), "DOT's consent page")


def wait_for_listener_page(driver, origin: str) -> str:
    """The browser is redirected to the host's listener; returns the text of the page it shows."""
    wait_for(driver, EC.url_matches("^" + re.escape(origin) + r"/callback\?"), f"the redirect to {origin}/callback")
    return wait_for(driver, EC.visibility_of_element_located((By.TAG_NAME, "p")), "the listener's page").text


def test_sign_in_in_a_real_browser_through_login_and_consent(start_host, oidc_plugin_dir, dot, chromium, tmp_path):
    host, pending, url, origin = start_browser_sign_in(start_host, oidc_plugin_dir, dot)
    redeemed = dot._get_json("/test/stats")["codes_redeemed"]
    with evidence_on_failure(chromium, tmp_path / "evidence"):
        log_in_to_consent_page(chromium, url)
        chromium.find_element(By.CSS_SELECTOR, 'input[name="allow"]').click()   # "Authorize"
        page = wait_for_listener_page(chromium, origin)
        landed = chromium.current_url   # carries the code: only ever shown redacted
        answer = host.wait_response(pending)
        assert "result" in answer, f"sign-in failed: {answer.get('error')}"
        assert answer["result"]["state"] == "signedIn"
        # The user is left on the host's own page, on the IP literal (never "localhost").
        on_listener = urllib.parse.urlsplit(landed).netloc == origin.removeprefix("http://")
        assert on_listener, f"ended on {redacted(landed)}"
        assert "Signed in" in page and "close this window" in page, f"the listener's page says {page!r}"
    assert host.result("checkSignInStatus", {"provider": "dot"})["state"] == "signedIn"
    # The tokens work: DOT's userinfo through the host names ada (DOT's sub is the user's id).
    answer = host.result("fetch", {"provider": "dot", "url": f"{dot.base}/o/userinfo/"})
    assert answer["status"] == 200, answer["status"]
    assert json.loads(answer["body"])["sub"] == dot._get_json(f"/test/user?name={USER}")["sub"], "not ada's userinfo"
    assert dot._get_json("/test/stats")["codes_redeemed"] - redeemed == 1, "exactly one code was redeemed"
    # Neither the authorization code nor the access token reached the host's log.
    code = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(landed).query))["code"]
    token = host.result("getAccessToken", {"provider": "dot"})["accessToken"]
    stderr = host.stderr_text()
    leaked = [name for name, secret in (("the authorization code", code), ("the access token", token)) if secret in stderr]
    assert not leaked, "reached the host's log"  # never the secrets themselves in a message


def test_denying_consent_cancels_the_sign_in_and_stores_nothing(start_host, oidc_plugin_dir, dot, chromium, tmp_path):
    host, pending, url, origin = start_browser_sign_in(start_host, oidc_plugin_dir, dot)
    redeemed = dot._get_json("/test/stats")["codes_redeemed"]
    with evidence_on_failure(chromium, tmp_path / "evidence"):
        log_in_to_consent_page(chromium, url)
        chromium.find_element(By.CSS_SELECTOR, 'input[type="submit"][value="Cancel"]').click()
        # The listener holds the browser's request until the outcome is known: the page tells the truth.
        page = wait_for_listener_page(chromium, origin)
        assert "did not complete" in page and "Signed in" not in page, f"the listener's page says {page!r}"
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(chromium.current_url).query))
        denied = query.get("error") == "access_denied" and "code" not in query
        assert denied, f"DOT redirected to {redacted(chromium.current_url)}"
        error = host.wait_response(pending).get("error")
        assert error and error["code"] == USER_CANCELLED and error["data"]["reason"] == "access_denied", error
    assert host.result("checkSignInStatus", {"provider": "dot"})["state"] == "notSignedIn"
    assert dot._get_json("/test/stats")["codes_redeemed"] == redeemed
