"""Precise detection: secrets found by what they are, look-alikes left for the task to use.

Reported by outside trials: the default policy masked a user's reply holding a
Luhn-valid tracking number and a published test card number before any decision saw
it, masked ``credit_card_7952624: {"brand": "visa", "last4": "4242"}`` whole because
of its key, and let URL credentials (``postgresql://admin:S3cret@...``) and PEM private
keys reach the store and the view in clear.
"""

from __future__ import annotations

from typing import Any

import pytest

from skillstate.state.detectors import TEST_CARDS, card_ok
from skillstate.state.redact import RedactionPolicy
from skillstate.state.secrets import MASK

R = RedactionPolicy().redactor()
VISA = "4556737586899855"  # Luhn-valid, an issued Visa shape, not a published test number

PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "-----END RSA PRIVATE KEY-----"
)
PEM_BODY_PART = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"


class TestByValue:
    """Secret shapes the outside trial found reaching the store in clear."""

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            (
                "postgresql://admin:S3cret@db.internal:5432/app",
                "postgresql://admin:***@db.internal:5432/app",
            ),
            ("redis://:hunter2@cache:6379/0", "redis://:***@cache:6379/0"),
            (
                "dsn=mysql+pymysql://svc:p%40ss@10.0.0.7/orders ok",
                "dsn=mysql+pymysql://svc:***@10.0.0.7/orders ok",
            ),
            (
                "clone https://oauth2:glpat-x@gitlab.com/a/b",
                "clone https://oauth2:***@gitlab.com/a/b",
            ),
        ],
    )
    def test_url_credentials_lose_their_password_only(self, text: str, expected: str) -> None:
        """The user, host and path stay readable: only the password is masked."""
        assert R.text(text) == expected

    @pytest.mark.parametrize(
        "text",
        [
            "http://localhost:8080/health",
            "see https://example.com/a:b@c for details",
            "mailto:bob@example.com",
            "ssh://git@github.com/org/repo",
            "time 12:30@noon",
        ],
    )
    def test_urls_without_a_password_are_left_alone(self, text: str) -> None:
        """A port, an @ in a path, a user without a password hide nothing."""
        assert R.text(text) == text

    def test_pem_private_key_body_is_masked(self) -> None:
        """The armour lines stay (a reader sees what was there), the key material goes."""
        out = R.text(f"key:\n{PEM}\nend")
        assert PEM_BODY_PART not in out
        assert (
            out == f"key:\n-----BEGIN RSA PRIVATE KEY-----{MASK}-----END RSA PRIVATE KEY-----\nend"
        )

    def test_pem_cut_short_is_masked_to_the_end(self) -> None:
        """A summary that cut the key off still hides what it kept of the body."""
        cut = PEM[:120]
        assert "PRIVATE KEY-----" in cut
        out = R.text(cut)
        assert out.endswith(f"PRIVATE KEY-----{MASK}")

    @pytest.mark.parametrize(
        "header",
        ["PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY", "ENCRYPTED PRIVATE KEY"],
    )
    def test_every_private_key_kind(self, header: str) -> None:
        text = f"-----BEGIN {header}-----\nAAAAB3NzaC1yc2EAAAADAQABAAABAQ\n-----END {header}-----"
        assert "AAAAB3NzaC1yc2E" not in R.text(text)

    def test_public_keys_and_certificates_are_not_secrets(self) -> None:
        for kind in ("PUBLIC KEY", "CERTIFICATE"):
            text = f"-----BEGIN {kind}-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOC\n-----END {kind}-----"
            assert R.text(text) == text

    @pytest.mark.parametrize(
        "token",
        [
            "glpat-" + "xY3" * 7,
            "hf_" + "AbCdEfGhIj" * 3 + "KlMn",
            "npm_" + "a1B2c3D4e5" * 3 + "F6g7H8",
            "SG." + "a" * 22 + "." + "B" * 43,
        ],
    )
    def test_more_api_key_formats(self, token: str) -> None:
        assert R.text(f"use {token} now") == f"use {MASK} now"

    def test_basic_credentials_in_a_header_line(self) -> None:
        """``Basic <base64 of user:password>`` is masked; a word after "basic" is not."""
        assert R.text("curl -H 'Basic dXNlcjpodW50ZXIy'") == "curl -H 'Basic ***'"
        assert R.text("a basic understanding") == "a basic understanding"


class TestCards:
    """A card number is masked where it looks like one; a look-alike reaches the decision."""

    def test_a_luhn_valid_token_without_context_is_kept(self) -> None:
        """10% of random digit runs pass Luhn: a tracking number is not a card."""
        reply = f"my parcel is {VISA}, where is it?"
        assert R.text(reply) == reply
        assert R.json({"tracking": VISA}) == {"tracking": VISA}

    @pytest.mark.parametrize("number", sorted(TEST_CARDS))
    def test_published_test_numbers_are_not_secrets(self, number: str) -> None:
        """Users paste 4242 4242 4242 4242 while trying a checkout: it hides nothing."""
        grouped = " ".join(number[i : i + 4] for i in range(0, len(number), 4))
        assert R.text(f"card {grouped}") == f"card {grouped}"
        assert not card_ok(number)

    @pytest.mark.parametrize(
        "text",
        [
            f"my card is {VISA}",
            f"Visa {VISA}",
            f"信用卡{VISA}",
            f"cc: {VISA}",
            "4556 7375 8689 9855",  # written in groups: the way cards are written
            "4556-7375-8689-9855",
        ],
    )
    def test_a_card_in_context_is_masked(self, text: str) -> None:
        assert "8689" not in R.text(text)

    @pytest.mark.parametrize(
        "doc",
        [
            {"card": VISA},
            {"payment": {"card": VISA}},
            {"card": {"number": VISA}},
            {"credit_card": {"brand": "visa", "pan": int(VISA)}},
        ],
    )
    def test_json_keys_are_context(self, doc: dict[str, Any]) -> None:
        """The key a number sits under (or its parent's) says it is a card."""
        assert VISA not in repr(R.json(doc))

    def test_issuer_and_length_must_exist(self) -> None:
        """A Luhn-valid number no network issues (a Visa of 15 digits) is not a card."""
        assert card_ok(VISA)
        assert not card_ok("455673758689982")  # 15 digits starting with 4: Luhn ok, no Visa
        assert not card_ok("9556737586899853")


class TestNamesOverStructures:
    """A key name masks a value, not a whole structure of data about the thing."""

    def test_card_description_under_a_card_name_stays_readable(self) -> None:
        """The outside trial's case: brand and last four digits are not secret."""
        doc = {"credit_card_7952624": {"brand": "visa", "last4": "4242", "exp_month": 12}}
        assert R.json(doc) is doc

    def test_plain_values_under_shallow_names_are_still_masked(self) -> None:
        out = R.json({"phone": "+1 415 555 2671x", "token": "c2VjcmV0LXZhbHVl", "pin": 4821})
        assert out == {"phone": MASK, "token": MASK, "pin": MASK}

    def test_lists_under_a_shallow_name_mask_their_plain_items(self) -> None:
        out = R.json({"phones": None, "mobile": ["555 0100", {"label": "home"}]})
        assert out == {"phones": None, "mobile": [MASK, {"label": "home"}]}

    def test_token_metadata_is_not_a_token(self) -> None:
        doc = {"token": {"kind": "refresh", "expires_in": 3600, "scopes": ["read"]}}
        assert R.json(doc) is doc

    def test_credential_structures_are_masked_leaf_by_leaf(self) -> None:
        """Under a credential every leaf goes, and the structure (its type) stays."""
        out = R.json({"credentials": {"user": "bob", "pass": "hunter2", "ttl": 60, "on": True}})
        assert out == {"credentials": {"user": MASK, "pass": MASK, "ttl": MASK, "on": True}}
        out = R.json({"password": ["hunter2", "hunter3"]})
        assert out == {"password": [MASK, MASK]}

    def test_patch_ops_follow_the_same_rules(self) -> None:
        patch = [
            {"op": "add", "path": "/facts/credit_card_1", "value": {"brand": "visa"}},
            {"op": "add", "path": "/facts/credit_card_1/last4", "value": "4242"},
            {"op": "add", "path": "/facts/phone", "value": "555 0100"},
            {"op": "add", "path": "/facts/credentials/user", "value": "bob"},
        ]
        out = R.json(patch)
        assert [op["value"] for op in out] == [{"brand": "visa"}, "4242", MASK, MASK]

    def test_a_credential_name_anywhere_above_wins(self) -> None:
        """``github_access_token`` ends in ``token`` (shallow) and ``access_token`` (a
        credential): the credential decides."""
        out = R.json({"github_access_token": {"value": "opaque-1"}})
        assert out == {"github_access_token": {"value": MASK}}

    def test_a_fake_sealed_prefix_does_not_hide_a_secret(self) -> None:
        """Only a real ciphertext's shape is left alone, not anything after ``enc:v1:``."""
        out = R.json({"note": "enc:v1:x call 13812345678", "password": "enc:v1:hunter2"})
        assert out == {"note": "enc:v1:x call ***", "password": MASK}
