"""The pure parts of console single sign-on: the claim-value → role mapping and its configuration errors
(the flow itself is proven in the browser against a real provider: tests/test_console_sso.py)."""

from __future__ import annotations

import pytest

from metaserver.console.sso import OidcClient, parse_roles, role_for
from metaserver.settings import Settings


def test_roles_parse_and_the_highest_match_wins() -> None:
    mapping = parse_roles(" kafka-admins:admin, urn:acme:ops:operator ,staff:viewer,")
    assert mapping == {"kafka-admins": "admin", "urn:acme:ops": "operator", "staff": "viewer"}
    assert role_for(["staff", "kafka-admins"], mapping) == "admin"
    assert role_for(["urn:acme:ops", "staff"], mapping) == "operator"
    assert role_for("staff other", mapping) == "viewer"  # a space-separated string claim
    assert role_for(["other"], mapping) is None
    assert role_for(None, mapping) is None
    assert role_for({"staff": True}, mapping) is None  # neither a list nor a string: nothing matches
    assert role_for([1, "staff"], mapping) == "viewer"


@pytest.mark.parametrize("text", ["kafka-admins:root", "kafka-admins", ":admin"])
def test_a_mapping_naming_no_role_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="console_oidc_roles"):
        parse_roles(text)


def test_a_client_missing_settings_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="console_oidc_client_id, console_oidc_redirect_uri, console_oidc_roles"):
        OidcClient(Settings(console_oidc_issuer="https://idp.example.test"))
