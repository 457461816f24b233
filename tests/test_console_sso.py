"""Console single sign-on in a real browser against a real OpenID provider (oidc-provider on Node.js, started by
the ``sso_console`` fixture): authorization code with PKCE through the provider's own login and consent pages,
roles mapped from the ``groups`` claim, forged and tampered callbacks refused with a clear page, and local users
still logging in (break-glass). Issue 30 item 5."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from tests.console_fixtures import PASSWORD, SCREENSHOTS, SsoConsole

MARKER = "<b>forged-by-test</b>"


@pytest.fixture
def page(page: Any, sso_console: SsoConsole) -> Iterator[Any]:
    """Only the two loopback servers answer (the provider's pages @import a web font the sandbox cannot reach)."""
    allowed = (sso_console.url, sso_console.provider.url)
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(allowed) else route.abort())
    yield page


def _to_provider(page: Any, console: SsoConsole) -> None:
    page.goto(console.url + "/console/login")
    page.click("#sso-login")
    page.wait_for_url(console.provider.url + "/**")
    page.wait_for_selector("input[name=login]")


def _started_state(page: Any, console: SsoConsole) -> str:
    """Start a login; the state the console sent to the provider's authorization endpoint (PKCE checked)."""
    requested: list[str] = []

    def record(request: Any) -> None:
        requested.append(request.url)

    page.on("request", record)
    _to_provider(page, console)
    page.remove_listener("request", record)
    auth = [u for u in requested if u.startswith(console.provider.url + "/auth?")]
    query = parse_qs(urlsplit(auth[0]).query)
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
    assert query["response_type"] == ["code"] and query["nonce"][0]
    return query["state"][0]


def _sign_in(page: Any, console: SsoConsole, login: str, shot: str | None = None) -> None:
    """Through the provider's login and consent pages (its dev login takes any password)."""
    _to_provider(page, console)
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", "anything")
    if shot:
        page.screenshot(path=str(SCREENSHOTS / f"console-sso-{shot}.png"))
    page.click("button[type=submit]")
    page.click("button:has-text('Continue')")  # consent: the console may read openid, profile and groups


def _local_login(page: Any, console: SsoConsole, username: str, password: str) -> None:
    page.context.clear_cookies()
    page.goto(console.url + "/console/login")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")


def _shot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"console-sso-{name}.png"), full_page=True)


def test_admin_group_logs_in_as_admin(sso_console: SsoConsole, page: Any) -> None:
    _to_provider(page, sso_console)
    page.goto(sso_console.url + "/console/login")  # the login page offers both ways in
    assert page.locator("#sso-login").inner_text() == "Log in with single sign-on"
    assert page.locator("input[name=password]").count() == 1
    _shot(page, "login")
    _sign_in(page, sso_console, "ada", shot="provider")
    page.wait_for_url(sso_console.url + "/console/")
    assert page.locator("form.who span").inner_text() == "sso:ada (admin)"
    users_link = page.locator("nav a[href='/console/users']")  # the admin-only control
    assert users_link.count() == 1
    _shot(page, "admin")
    users_link.click()
    row = page.locator("tr", has_text="sso:ada")
    assert row.count() == 1 and "admin" in row.inner_text()
    page.goto(sso_console.url + "/console/audit")
    login = page.locator("tr", has_text="console.login").filter(has_text="sso:ada").first
    assert "claim_from: id_token (added)" in login.inner_text() and "role: admin (added)" in login.inner_text()


def test_viewer_group_gets_viewer_rights_only(sso_console: SsoConsole, page: Any) -> None:
    _sign_in(page, sso_console, "vic")
    page.wait_for_url(sso_console.url + "/console/")
    assert page.locator("form.who span").inner_text() == "sso:vic (viewer)"
    assert page.locator("nav a[href='/console/users']").count() == 0
    page.goto(sso_console.url + "/console/audit")  # this provider gives vic's groups in userinfo only
    login = page.locator("tr", has_text="console.login").filter(has_text="sso:vic").first
    assert "claim_from: userinfo (added)" in login.inner_text() and "role: viewer (added)" in login.inner_text()
    csrf = page.locator("form.who input[name=csrf]").get_attribute("value")
    # an admin action with the viewer's own valid session and CSRF token is refused
    resp = page.request.post(sso_console.url + "/console/users",
                             form={"csrf": csrf, "username": "mallory", "password": "long-enough-1", "role": "admin"})
    assert resp.status == 403 and "Forbidden" in resp.text()
    page.goto(sso_console.url + "/console/users")
    assert "Forbidden: your role may not do this" in page.locator("p.error").inner_text()
    # no console user was made by the refused action
    _local_login(page, sso_console, "mallory", "long-enough-1")
    assert page.locator("p.error").inner_text() == "Wrong username or password."


def test_an_admin_disabling_an_sso_user_ends_its_access_at_once(sso_console: SsoConsole, page: Any,
                                                                 browser: Any) -> None:
    _sign_in(page, sso_console, "vic")
    page.wait_for_url(sso_console.url + "/console/")
    admin_context = browser.new_context(viewport={"width": 1360, "height": 900})
    try:
        admin = admin_context.new_page()
        _local_login(admin, sso_console, sso_console.local_admin, PASSWORD)
        admin.goto(sso_console.url + "/console/users")
        admin.on("dialog", lambda dialog: dialog.accept())
        admin.locator("#users tr", has_text="sso:vic").locator("button", has_text="Disable").click()
        admin.wait_for_url(sso_console.url + "/console/users")
        assert admin.locator("#users tr", has_text="sso:vic").locator("td").nth(2).inner_text() == "no"
        _shot(admin, "users")
        page.goto(sso_console.url + "/console/")  # vic's session stopped answering
        assert page.url == sso_console.url + "/console/login"
        page.click("#sso-login")  # signed in at the provider still, but its word no longer lets vic in
        page.wait_for_url(sso_console.url + "/console/sso/callback*")
        assert page.locator("p.error").inner_text() == \
            "Single sign-on failed: this account is disabled in the console; ask an administrator."
        admin.locator("#users tr", has_text="sso:vic").locator("button", has_text="Enable").click()
        admin.wait_for_url(sso_console.url + "/console/users")
        assert admin.locator("#users tr", has_text="sso:vic").locator("td").nth(2).inner_text() == "yes"
        admin.goto(sso_console.url + "/console/audit")
        assert admin.locator("tr", has_text="user.disable").filter(has_text="sso:vic").count() == 1
    finally:
        admin_context.close()


def test_account_without_a_mapped_group_is_refused(sso_console: SsoConsole, page: Any) -> None:
    _sign_in(page, sso_console, "nobody")
    page.wait_for_url(sso_console.url + "/console/sso/callback*")
    text = page.locator("p.error").inner_text()
    assert text.startswith("Single sign-on failed: your account is not in any group this console maps to a role")
    assert page.locator("form.who").count() == 0  # no session


def test_forged_tampered_and_replayed_callbacks_are_refused(sso_console: SsoConsole, page: Any) -> None:
    callback = sso_console.url + "/console/sso/callback"
    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url))

    def answer(params: dict[str, str]) -> tuple[int, str]:
        resp = page.goto(callback + "?" + urlencode(params))
        content = page.content()
        assert MARKER not in content and "forged-by-test" not in content  # nothing of the request echoed
        return resp.status, page.locator("p.error").inner_text()

    state = _started_state(page, sso_console)
    # a callback this browser did not start (forged state): refused, the login under way is kept
    status, text = answer({"code": "forged-by-test", "state": "forged-by-test" + MARKER})
    assert status == 400 and "(state mismatch)" in text, text
    _shot(page, "refused")
    # an error the provider did not send, with a text of the attacker's: shown as a bare code, nothing echoed
    status, text = answer({"state": state, "error": MARKER, "error_description": MARKER})
    assert status == 400 and text == "Single sign-on failed: the identity provider did not sign you in (error).", text

    # a login whose callback carries a tampered code: the provider refuses the exchange
    state = _started_state(page, sso_console)
    status, text = answer({"code": "tampered-code-0123456789", "state": state})
    assert status == 400 and "refused the authorization code" in text, text
    assert page.locator("form.who").count() == 0

    # a real login, then its callback replayed: the login was used up
    requested.clear()
    _sign_in(page, sso_console, "ada")
    page.wait_for_url(sso_console.url + "/console/")
    real = [u for u in requested if u.startswith(callback + "?")]
    assert len(real) == 1
    status, text = answer({k: v[0] for k, v in parse_qs(urlsplit(real[0]).query).items()})
    assert status == 400 and "no login is in progress in this browser" in text, text


def test_cancel_at_the_provider_gives_a_clear_page(sso_console: SsoConsole, page: Any) -> None:
    _to_provider(page, sso_console)
    page.click("text=[ Cancel ]")
    page.wait_for_url(sso_console.url + "/console/sso/callback*")
    assert page.locator("p.error").inner_text() == \
        "Single sign-on failed: the identity provider did not sign you in (access_denied)."
    assert page.locator("a[href='/console/login']").count() == 1


def test_provider_down_is_a_clear_page_and_local_users_still_log_in(sso_console: SsoConsole, page: Any) -> None:
    """Break-glass: the last test of the module, it stops the provider."""
    state = _started_state(page, sso_console)
    sso_console.provider.stop()
    resp = page.goto(sso_console.url + "/console/sso/callback?" + urlencode({"code": "a-code", "state": state}))
    assert resp.status == 502
    assert page.locator("p.error").inner_text() == \
        "Single sign-on failed: the identity provider could not be reached; try again later."
    _local_login(page, sso_console, sso_console.local_admin, PASSWORD)
    page.wait_for_url(sso_console.url + "/console/")
    assert page.locator("form.who span").inner_text() == f"{sso_console.local_admin} (admin)"
    # a single sign-on user has no password to guess
    _local_login(page, sso_console, "sso:ada", "!sso")
    assert page.locator("p.error").inner_text() == "Wrong username or password."
