"""A redactor is built once per set of secrets and remembers what it found clean (issue 30).

The runtime asks for a redactor several times per step and scans the same short
strings (patch ops and paths, skill names) every step. What it remembers must never
let a secret through: a value is always scanned, only an op and path already found
clean are skipped, and a string is remembered only once it came out unchanged.
"""

from __future__ import annotations

import pickle

from skillstate.state.redact import RedactionPolicy
from skillstate.state.secrets import MASK

PHONE = "13812345678"  # a mainland China mobile number: the default policy masks it
SECRET = "sk-live-0123456789abcdef"


def test_one_redactor_per_set_of_secrets() -> None:
    policy = RedactionPolicy()
    first = policy.redactor([SECRET, "another-secret-value"])
    assert policy.redactor(["another-secret-value", SECRET]) is first  # order does not matter
    assert policy.redactor([SECRET]) is not first
    assert policy.redactor([SECRET]).text(f"key {SECRET}") == f"key {MASK}"


def test_a_pickled_policy_leaves_its_secrets_behind() -> None:
    policy = RedactionPolicy()
    policy.redactor([SECRET]).text("warm the caches")
    data = pickle.dumps(policy)
    assert SECRET.encode() not in data
    copy = pickle.loads(data)
    assert copy == policy
    assert copy.redactor([SECRET]).text(SECRET) == MASK


def test_a_value_is_scanned_every_time_under_a_remembered_path() -> None:
    redactor = RedactionPolicy().redactor([SECRET])
    clean = [{"op": "replace", "path": "/note", "value": "nothing to see"}]
    assert redactor.json(clean) is clean
    assert redactor.json(clean) is clean  # the op and path are remembered now
    leaked = [{"op": "replace", "path": "/note", "value": f"call {PHONE} with {SECRET}"}]
    assert redactor.json(leaked) == [
        {"op": "replace", "path": "/note", "value": f"call {MASK} with {MASK}"}
    ]
    nested = [{"op": "add", "path": "/note", "value": {"deep": [SECRET]}}]
    assert redactor.json(nested) == [{"op": "add", "path": "/note", "value": {"deep": [MASK]}}]


def test_a_credential_path_masks_its_value_every_time() -> None:
    redactor = RedactionPolicy().redactor()
    for value in ("hunter2-password", "another-one", "third"):
        ops = [{"op": "replace", "path": "/facts/api_key", "value": value}]
        assert redactor.json(ops) == [{"op": "replace", "path": "/facts/api_key", "value": MASK}]


def test_a_secret_in_a_path_is_masked_and_never_remembered_clean() -> None:
    redactor = RedactionPolicy().redactor([SECRET])
    ops = [{"op": "add", "path": f"/facts/{SECRET}", "value": 1}]
    for _ in range(3):
        assert redactor.json(ops) == [{"op": "add", "path": f"/facts/{MASK}", "value": 1}]


def test_a_string_found_clean_once_does_not_hide_another() -> None:
    redactor = RedactionPolicy().redactor()
    assert redactor.text("call me at home") == "call me at home"
    assert redactor.text(f"call me at {PHONE}") == f"call me at {MASK}"
    # The same text under keys that give a detector its context is judged again.
    assert redactor.json({"phone": PHONE}) == {"phone": MASK}
