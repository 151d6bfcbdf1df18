"""Redaction by policy: key names and value shapes, on text, JSON, events and artifacts.

Every built-in value detector gets a hit and near misses (Luhn-invalid cards, IDs
with a wrong check character, numbers inside longer digit runs); name rules are
checked against the keys the project itself writes (``view_tokens``, ``usage.prompt``,
``max_tokens``), which must never be masked.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skillstate.events import Event, SkillTransition, TokenUsage, ToolCall, Verdict
from skillstate.state.detectors import (
    DEFAULT_NAMES,
    DETECTORS,
    Detector,
    NameMatcher,
    card_ok,
    cn_id_ok,
    jwt_ok,
    key_words,
    luhn_ok,
    ssn_ok,
)
from skillstate.state.redact import RedactionPolicy, Redactor
from skillstate.state.secrets import MASK, PREFIX

POLICY = RedactionPolicy()
R = POLICY.redactor()
VALUES_ONLY = RedactionPolicy(names=())  # no names, so no name=value masking either

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
CN_ID = "11010519491231002X"  # the textbook example: Beijing, born 1949-12-31
VISA = "4556737586899855"  # Luhn-valid, an issued Visa shape, not a published test number
VISA_GROUPED = "4556 7375 8689 9855"


def luhn_complete(prefix: str) -> str:
    """``prefix`` plus the digit that makes it Luhn-valid (written independently of luhn_ok)."""
    total = 0
    for i, c in enumerate(reversed(prefix)):
        d = int(c)
        total += sum(divmod(d * 2, 10)) if i % 2 == 0 else d
    return prefix + str((10 - total % 10) % 10)


def cn_check(first17: str) -> str:
    """The ISO 7064 MOD 11-2 check character, by the (12 - S mod 11) mod 11 formula."""
    weights = [2 ** (17 - i) % 11 for i in range(17)]
    value = (12 - sum(int(c) * w for c, w in zip(first17, weights, strict=True)) % 11) % 11
    return "X" if value == 10 else str(value)


def masks(text: str, policy: RedactionPolicy = POLICY) -> bool:
    """Whether the policy's redactor changes ``text``."""
    return policy.redactor().text(text) != text


# ---------------------------------------------------------------- value detectors


@pytest.mark.parametrize(
    ("detector", "hit", "misses"),
    [
        (
            "bearer",
            "Authorization: Bearer abcDEF0123456789xyz",
            ["use Bearer authentication here", "Bearer short1", "unbearer abcDEF0123456789xyz"],
        ),
        ("jwt", f"token {JWT} end", ["eyJhbGciOi.not-a-jwt", "eyJub3QganNvbg.abcdefgh.ijk"]),
        (
            "openai_key",
            "key=sk-proj-Ab12Cd34Ef56Gh78Ij90KlMn",
            ["sk-learn-developers-handbook", "task-Ab12Cd34Ef56Gh78Ij90KlMn", "sk-short1"],
        ),
        (
            "github_token",
            "ghp_" + "A1b2C3d4" * 5,
            ["ghp_tooShort123", "xghp_" + "A1b2C3d4" * 5, "ghx_" + "A1b2C3d4" * 5],
        ),
        ("github_token", "github_pat_11ABCDEFG0123456789_abcdefghij", ["github_pat_short"]),
        (
            "aws_access_key",
            "AKIAIOSFODNN7EXAMPLE",
            ["AKIAIOSFODNN7EXAMPLEX", "XAKIAIOSFODNN7EXAMPLE", "AKIAiosfodnn7example"],
        ),
        ("slack_token", "xoxb-123456789012-abcdefABCDEF", ["xoxz-123456789012-abc", "xoxb-1"]),
        (
            "stripe_key",
            "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
            ["sk_live_short", "ask_live_4eC39HqLyjWD"],
        ),
        ("stripe_key", "rk_test_4eC39HqLyjWDarjtT1zdp7dc", ["rk_prod_4eC39HqLyjWDarjtT1zdp7dc"]),
        (
            "google_api_key",
            "AIzaSyA1bC2dE3fG4hI5jK6lM7nO8pQ9rS0tU1v",
            ["AIzaSyA1bC2dE3", "AIzaSyA1bC2dE3fG4hI5jK6lM7nO8pQ9rS0tU1vW"],
        ),
        (
            "card_number",
            f"paid with {VISA_GROUPED} today",
            [
                "paid with 4556 7375 8689 9856 today",  # Luhn-invalid
                "card 14556737586899855",  # inside a longer run
                "ts 1715000000000",  # millisecond timestamp: no issuer starts with 1
                f"ref {VISA_GROUPED} 2222",  # part of a longer grouped run
                f"card x0.{VISA}",  # decimals, not a card
                f"tracking number {VISA}",  # Luhn-valid digits, no sign of a card
                "paid with 4242 4242 4242 4242 today",  # a published test number
                "card 4111111111111111",  # a published test number
            ],
        ),
        ("card_number", "amex 3791-826451-00735", ["amex 3791-826451-00736"]),
        ("card_number", f"visa {VISA}.", [f"order {VISA}.", f"id={VISA}"]),
        (
            "phone_e164",
            "call +1 415 555 2671 now",
            ["1+14155552671", "+0123456789", "+1234567", "+1234567890123456"],
        ),
        (
            "phone_cn",
            "电话13812345678，谢谢",
            ["12812345678", "213812345678", "1381234567", "0.13812345678", "id13812345678"],
        ),
        ("phone_cn", "call 138-1234-5678", ["call 9 138-1234-5678", "call 138-1234-5678-9"]),
        (
            "cn_id",
            f"身份证{CN_ID}",
            [
                "11010519491231002Y",  # wrong check character
                "110105194912310021",
                "11010519491332002X",  # no 13th month
                "9" + CN_ID[1:],  # no region starts with 9
                "2" + CN_ID,  # inside a longer run
            ],
        ),
        (
            "us_ssn",
            "SSN 078-05-1120.",
            ["000-12-3456", "666-12-3456", "912-12-3456", "1-078-05-1120"],
        ),
    ],
)
def test_value_detector_hits_and_misses(detector: str, hit: str, misses: list[str]) -> None:
    """Each detector masks its example and leaves look-alikes alone, and can be switched off."""
    assert masks(hit), hit
    for miss in misses:
        assert not masks(miss), miss
    assert masks(hit, VALUES_ONLY), hit
    assert not masks(hit, VALUES_ONLY.without(detector)), f"{detector} still masks {hit!r}"


def test_mask_stays_inside_the_string() -> None:
    """A value found inside text is replaced in place, keeping the words around it."""
    assert R.text("call me at 13812345678 or +44 20 7946 0958.") == "call me at *** or ***."
    assert R.text("Authorization: Bearer abcDEF0123456789xyz") == "Authorization: Bearer ***"
    assert R.text(f"a {JWT} b card {VISA} c") == "a *** b card *** c"


def test_fallback_to_a_later_detector_at_the_same_position() -> None:
    """An 18-digit number failing the ID checksum is still masked when it is a valid card."""
    card = luhn_complete("62123456789012345")
    assert len(card) == 18
    assert not cn_id_ok(card)
    assert R.text(f"card {card}") == "card ***"


def test_numbers_next_to_masked_numbers_are_masked_too() -> None:
    """A card skipped for touching a phone number is masked once the phone is ``***``."""
    assert R.text(f"13812345678 {VISA_GROUPED}") == "*** ***"


def test_validators() -> None:
    """Luhn, the Chinese ID checksum, SSN ranges and JWT headers judge the candidates."""
    assert luhn_ok("4111111111111111")
    assert luhn_ok("378282246310005")
    assert not luhn_ok("4111111111111112")
    assert not luhn_ok("0000")
    assert cn_id_ok(CN_ID)
    assert cn_id_ok(CN_ID.lower())
    assert not cn_id_ok("110105194902300021")  # 30 February
    assert not cn_id_ok("110105189912310021")  # born before 1900
    assert ssn_ok("123-45-6789")
    assert not ssn_ok("123-00-6789")
    assert not ssn_ok("123-45-0000")
    assert jwt_ok(JWT)
    assert not jwt_ok("eyJ!!!.a.b")
    assert not jwt_ok("eyJhYmMi.a.b")


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["4", "51", "2221", "6011", "62"]),
    st.integers(min_value=13, max_value=19),
    st.randoms(use_true_random=False),
)
def test_any_luhn_valid_card_is_masked(prefix: str, length: int, rnd: Any) -> None:
    """Any Luhn-valid number of a card's length and issuer prefix is masked in prose
    that names a card (the published test numbers aside)."""
    body = prefix + "".join(str(rnd.randint(0, 9)) for _ in range(length - len(prefix) - 1))
    card = luhn_complete(body)
    if not card_ok(card):  # a length this network does not issue, or a test number
        cards_only = POLICY.without("cn_id", "phone_cn").redactor()
        assert cards_only.text(f"card: {card}, thanks") == f"card: {card}, thanks"
        return
    assert R.text(f"card: {card}, thanks") == "card: ***, thanks"
    assert R.text(f"ref: {card}, thanks") == f"ref: {card}, thanks"  # no context: kept
    broken = card[:-1] + str((int(card[-1]) + 1) % 10)
    assert broken.isdigit()
    assert not luhn_ok(broken)
    assert POLICY.without("cn_id", "phone_cn").redactor().text(f"n {broken}.") == f"n {broken}."


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=10**17 - 1))
def test_any_valid_cn_id_is_masked(n: int) -> None:
    """Any 18-character ID with a real region, birth date and check character is masked."""
    first17 = f"3{n % 10**5:05d}19{n % 97 + 2:02d}{n % 12 + 1:02d}{n % 28 + 1:02d}{n % 1000:03d}"
    number = first17 + cn_check(first17)
    assert cn_id_ok(number)
    assert R.text(f"ID:{number};") == "ID:***;"
    wrong = first17 + ("0" if number[-1] != "0" else "1")
    assert not cn_id_ok(wrong)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789", min_size=20, max_size=40))
def test_long_digit_runs_are_left_alone(run: str) -> None:
    """No detector takes part of a run of 20 or more digits (an id, a hash, a big number)."""
    assert R.text(f"id {run} ok") == f"id {run} ok"
    assert R.text(f"x{run[:12]}y") == f"x{run[:12]}y"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_text_is_idempotent(text: str) -> None:
    """Redacting twice changes nothing more than redacting once, whatever the input."""
    once = R.text(text)
    assert R.text(once) == once


# ---------------------------------------------------------------- names


def test_key_words_split() -> None:
    """Keys split on separators, camelCase and digits; trailing numbers are dropped."""
    assert key_words("X-APIKey2") == ("x", "api", "key")
    assert key_words("accessToken") == ("access", "token")
    assert key_words("headers.Set-Cookie") == ("headers", "set", "cookie")
    assert key_words("user密码") == ("user", "密码")
    assert key_words("__") == ()


@pytest.mark.parametrize(
    "key",
    [
        "access_token", "accessToken", "X-Access-Token", "github_access_token", "id_token",
        "API_KEY", "apiKey", "apikey", "x-api-key", "aws_secret_access_key", "client_secret",
        "Password", "db_password", "password2", "passwd", "pwd", "Authorization", "Cookie",
        "Set-Cookie", "sessionId", "private_key", "user_phone", "phoneNumber", "mobile",
        "id_card", "idCard", "national_id", "ssn", "card_number", "creditCard", "cvv", "cvc",
        "iban", "headers.authorization",
    ],
)  # fmt: skip
def test_sensitive_names(key: str) -> None:
    """Keys whose trailing words are a sensitive name are masked."""
    assert NameMatcher(DEFAULT_NAMES)[key], key


@pytest.mark.parametrize(
    "key",
    [
        "tokens", "max_tokens", "maxTokens", "view_tokens", "prompt_tokens", "token_count",
        "tokenizer", "token_type", "usage.prompt", "prompt", "completion", "cached",
        "iphone", "phone_verified", "password_hint", "secrets_dir", "keyboard", "primary_key",
        "cache_key", "idempotency_key", "id", "card", "cookie_consent", "session",
    ],
)  # fmt: skip
def test_names_that_are_not_secrets(key: str) -> None:
    """Counts and look-alike keys (plurals, a sensitive word not at the end) are left alone."""
    assert not NameMatcher(DEFAULT_NAMES)[key], key


def test_name_masking_in_nested_json() -> None:
    """A plain value under a sensitive key becomes "***"; under a credential every leaf does
    (the structure stays); null, booleans and empties stay."""
    doc: dict[str, Any] = {
        "user": {"user_phone": 13812345678, "name": "Li", "password": None, "pin": ""},
        "auth": [{"accessToken": {"value": "x", "expires": 3600}}, {"apiKey": True}],
        "view_tokens": 812,
        "usage": {"prompt": 1234, "completion": 56},
        "max_tokens": 256,
    }
    out = R.json(doc)
    assert out["user"] == {"user_phone": MASK, "name": "Li", "password": None, "pin": ""}
    assert out["auth"] == [{"accessToken": {"value": MASK, "expires": MASK}}, {"apiKey": True}]
    assert out["view_tokens"] == 812
    assert out["usage"] is doc["usage"]
    assert out["max_tokens"] == 256
    assert doc["user"]["user_phone"] == 13812345678  # a copy, not in place


def test_values_are_scanned_under_any_key() -> None:
    """A phone in an ordinary field, a key in a list, a card stored as a number are masked."""
    doc = {"note": "reach me on 13812345678", "items": ["ok", JWT], "card": int(VISA)}
    assert R.json(doc) == {"note": "reach me on ***", "items": ["ok", MASK], "card": MASK}


def test_sealed_values_are_never_touched() -> None:
    """Ciphertext under a sensitive name survives, so masking a state keeps its secrets."""
    sealed = PREFIX + "gAAAAABl" + "A" * 80 + "-13812345678-"
    doc = {"api_token": sealed, "password": sealed, "note": sealed}
    assert R.json(doc) is doc


def test_json_patch_ops_mask_by_path() -> None:
    """A patch op's value is masked when a key in its path is sensitive."""
    patch: list[dict[str, Any]] = [
        {"op": "add", "path": "/facts/user_phone", "value": "555 0100"},
        {"op": "replace", "path": "/contacts/mobile/0", "value": "555 0101"},
        {"op": "add", "path": "/facts/tokens", "value": 12},
        {"op": "add", "path": "/facts", "value": {"password": "hunter2", "city": "Lisbon"}},
        {"op": "remove", "path": "/facts/password"},
        {"op": "add", "path": "/a~1password", "value": "x1"},
    ]
    out = R.json(patch)
    assert [op.get("value") for op in out] == [
        MASK,
        MASK,
        12,
        {"password": MASK, "city": "Lisbon"},
        None,
        MASK,
    ]
    assert out[2] is patch[2]
    assert out[4] is patch[4]


def test_free_text_assignments() -> None:
    """``name=value`` and ``name: value`` in text mask the value when the name is sensitive."""
    assert (
        R.text("GET /a?access_token=abc123&max_tokens=5") == "GET /a?access_token=***&max_tokens=5"
    )
    assert R.text('{"password": "hunter 2", "tokens": 3}') == '{"password": "***", "tokens": 3}'
    assert R.text("db password=s3cr3t; user=bob") == "db password=***; user=bob"
    assert R.text("Authorization: Basic dXNlcjpwYXNz") == "Authorization: Basic ***"
    assert R.text("token: null, mytoken=abc, tokens=7") == "token: null, mytoken=abc, tokens=7"
    assert RedactionPolicy(assignments=False).redactor().text("pwd=abc1") == "pwd=abc1"


def test_json_returns_the_same_object_when_clean() -> None:
    """With nothing to mask, the input comes back as is: the runtime's cheap no-op test."""
    doc = {"task_id": "t", "version": 3, "view_tokens": 10, "facts": {"city": "Lisbon"}}
    assert R.json(doc) is doc
    out = R.json({**doc, "facts": {"city": "Lisbon", "phone": "x1"}})
    assert out["facts"] == {"city": "Lisbon", "phone": MASK}


_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-999, max_value=999),
    st.text(alphabet="abc xyz-", max_size=12),
)
_SAFE_KEYS = st.sampled_from(["a", "note", "tokens", "max_tokens", "view_tokens", "prompt"])
_TREES = st.recursive(
    _LEAVES,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(_SAFE_KEYS, kids, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=200, deadline=None)
@given(_TREES)
def test_clean_trees_come_back_as_is(tree: Any) -> None:
    """A document with nothing sensitive is returned as the very same object."""
    assert R.json(tree) is tree


@settings(max_examples=200, deadline=None)
@given(_TREES, st.sampled_from(["password", "x-api-key", "credentials", "authToken", "secret"]))
def test_planted_secrets_never_survive(tree: Any, key: str) -> None:
    """A phone in any string and any value under a credential's key are gone from the output."""
    doc = {"data": tree, key: {"deep": tree, "v": "opaque-1"}, "note": ["tel 13812345678"]}
    out = json.dumps(R.json(doc))
    assert "13812345678" not in out
    assert "opaque-1" not in out
    assert json.loads(out)["data"] == json.loads(json.dumps(tree))


# ---------------------------------------------------------------- events


def _event(**kw: Any) -> Event:
    base: dict[str, Any] = {"task_id": "t", "version": 2, "actor": "policy", "action": {}}
    return Event(**{**base, **kw})


def test_event_redaction() -> None:
    """Action, tool-call args and summaries, error, verdict, transition and patch are masked."""
    event = _event(
        action={"kind": "call_skill", "params": {"user_phone": "13812345678", "city": "Porto"}},
        tool_calls=(
            ToolCall(tool="login", args={"password": "hunter22", "user": "li"}, summary=JWT),
        ),
        verdict=Verdict.failed(f"card {VISA_GROUPED} declined"),
        skill_transition=SkillTransition(to_skill="pay", reason="got +14155552671"),
        error="401 for ?access_token=abc123",
        patch=[{"op": "add", "path": "/facts/id_card", "value": CN_ID}],
        view_tokens=812,
        usage=TokenUsage(prompt=1234, completion=56),
    )
    clean = R.event(event)
    assert clean.action["params"] == {"user_phone": MASK, "city": "Porto"}
    assert clean.tool_calls[0].args == {"password": MASK, "user": "li"}
    assert clean.tool_calls[0].summary == MASK
    assert clean.verdict == Verdict.failed("card *** declined")
    assert clean.skill_transition is not None
    assert clean.skill_transition.reason == "got ***"
    assert clean.error == "401 for ?access_token=***"
    assert clean.patch == [{"op": "add", "path": "/facts/id_card", "value": MASK}]
    assert clean.view_tokens == 812
    assert clean.usage == event.usage
    assert clean.started_at == event.started_at
    for secret in ("13812345678", "hunter22", JWT, "4556 7375", "14155552671", "abc123", CN_ID):
        assert secret not in clean.model_dump_json()


def test_clean_event_is_returned_as_is() -> None:
    """An event with nothing to mask is the same object (no copy per commit)."""
    event = _event(
        action={"kind": "finish", "answer": "done"},
        tool_calls=(ToolCall(tool="search", args={"q": "hotels"}, summary="3 results"),),
        patch=[{"op": "replace", "path": "/view_tokens", "value": 90}],
        view_tokens=90,
    )
    assert R.event(event) is event


# ---------------------------------------------------------------- bytes


def test_bytes_json_artifact_masked_by_name_and_value() -> None:
    """A JSON tool output is parsed, masked like JSON, and written again."""
    raw = json.dumps({"access_token": "opaque-abc", "note": "tel 13812345678"}, indent=1).encode()
    out = R.bytes(raw)
    assert json.loads(out) == {"access_token": MASK, "note": "tel ***"}
    assert b"\n" in out  # pretty input stays pretty
    compact = R.bytes(b'{"password":"x1","n":[1,2]}')
    assert json.loads(compact) == {"password": MASK, "n": [1, 2]}
    clean = b'{"ok": true, "tokens": 12}'
    assert R.bytes(clean) is clean


def test_bytes_non_json_masked_by_value_only() -> None:
    """Other bytes are masked by value in place; invalid UTF-8 bytes survive untouched."""
    raw = b"user_phone 13812345678\n\xff\xfe card=4556737586899855"
    assert R.bytes(raw) == b"user_phone ***\n\xff\xfe card=***"
    broken_json = b'{"password": "x1", '
    assert R.bytes(broken_json) == b'{"password": "***", '
    plain = b"nothing here \x00\xff"
    assert R.bytes(plain) is plain


# ---------------------------------------------------------------- extras, exemptions, off


def test_user_extras() -> None:
    """Extra names, literal values, compiled regexes and custom detectors are all masked."""
    policy = RedactionPolicy(
        extra_names=("order_pin_code",),
        extra_values=(
            "ACME-INTERNAL",
            re.compile(r"emp-\d{6}", re.IGNORECASE),
            Detector(name="ticket", pattern=r"TCK\d{4}", validate=lambda t: t != "TCK0000"),
        ),
    )
    r = policy.redactor()
    assert r.json({"orderPinCode": 42, "x": "ACME-INTERNAL id EMP-123456 TCK1234 TCK0000"}) == {
        "orderPinCode": MASK,
        "x": "*** id *** *** TCK0000",
    }
    assert r.text("user_phone=13812345678") == "user_phone=***"  # defaults still apply


def test_exempt_names_keep_the_value_but_still_scan_it() -> None:
    """An exempt key's value is not masked by name, yet a phone inside it is."""
    r = RedactionPolicy(exempt_names=("page_token",)).redactor()
    out = r.json({"next_page_token": "cursor-77", "access_token": "a1", "pageToken": "13812345678"})
    assert out == {"next_page_token": "cursor-77", "access_token": MASK, "pageToken": MASK}
    assert r.json({"page_token": "cursor-77"}) == {"page_token": "cursor-77"}


def test_without_rejects_unknown_detectors() -> None:
    """Switching off a detector name that does not exist is an error, not a silent no-op."""
    with pytest.raises(ValueError, match="phone_xx"):
        POLICY.without("phone_xx")
    assert {d.name for d in DETECTORS} >= {"bearer", "jwt", "card_number", "cn_id", "us_ssn"}
    assert len({d.name for d in DETECTORS}) == len(DETECTORS)


def test_policy_is_hashable_and_takes_lists() -> None:
    """Lists become tuples (so compiled policies are shared) and bad input is refused."""
    a = RedactionPolicy(extra_names=["otp_code"])  # type: ignore[arg-type]
    assert a == RedactionPolicy(extra_names=("otp_code",))
    assert hash(a) == hash(RedactionPolicy(extra_names=("otp_code",)))
    with pytest.raises(TypeError):
        RedactionPolicy(extra_names="otp_code")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no letters"):
        RedactionPolicy(extra_names=("__",)).redactor()
    with pytest.raises(ValueError, match="does not compile"):
        RedactionPolicy(extra_values=(Detector(name="bad", pattern="(unclosed"),)).redactor()


def test_off_policy_masks_only_exact_secrets() -> None:
    """The "off" policy does no pattern redaction; exact secrets still go."""
    off = RedactionPolicy.OFF
    assert off == RedactionPolicy.off()
    assert not off.redactor()
    r = off.redactor(["tok-5f1c9e0a"])
    assert r.json({"password": "x1", "p": "13812345678 tok-5f1c9e0a"}) == {
        "password": "x1",
        "p": "13812345678 ***",
    }


def test_exact_redactor_unchanged() -> None:
    """``Redactor(values)`` without a policy masks exact values only, as before."""
    r = Redactor(["tok-5f1c9e0a"])
    assert r.text("13812345678 tok-5f1c9e0a") == "13812345678 ***"
    assert r.json({"password": "x1", "n": 4111111111111111}) == {
        "password": "x1",
        "n": 4111111111111111,
    }
    assert r.bytes(b'{"password": "tok-5f1c9e0a"}') == b'{"password": "***"}'
    assert not Redactor([])
    assert not Redactor()


def test_policy_redactor_combines_exact_and_patterns() -> None:
    """``policy.redactor(secrets)`` masks the given secrets and what the policy detects."""
    r = POLICY.redactor(["s3cret-value"])
    assert r
    assert "forms" in repr(r)
    assert "s3cret" not in repr(r)
    assert r.text("s3cret-value and 13812345678") == "*** and ***"
    assert r.json({"n": "s3cret-value"}) == {"n": MASK}
