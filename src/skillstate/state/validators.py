"""Validators of the value detectors: what turns a look-alike into a miss.

Each takes a detector's whole match and says whether it is the real thing: a card
number a network could issue (Luhn, issuer prefix and length, not a published test
number), a Chinese resident ID (region, birth date, check character), an SSN the SSA
could issue, a JWT whose header decodes, credentials that decode to ``user:password``.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json

__all__ = [
    "TEST_CARDS",
    "basic_ok",
    "bearer_ok",
    "card_ok",
    "cn_id_ok",
    "has_digit",
    "jwt_ok",
    "luhn_ok",
    "ssn_ok",
]


def luhn_ok(text: str) -> bool:
    """Whether the digits of ``text`` pass the Luhn check (card numbers)."""
    digits = [int(c) for c in text if c.isdigit()]
    total = 0
    for i, digit in enumerate(reversed(digits)):
        doubled = digit * 2 if i % 2 else digit
        total += doubled - 9 if doubled > 9 else doubled
    return len(digits) >= 12 and total % 10 == 0


def card_ok(text: str) -> bool:
    """A card number a network could issue: Luhn, an issuer prefix and length that exist,
    and not one of the public test numbers (they hide nothing, and users paste them)."""
    digits = "".join(c for c in text if c.isdigit())
    return luhn_ok(digits) and _issued(digits) and digits not in TEST_CARDS


def _issued(d: str) -> bool:
    """Whether ``d``'s prefix and length belong to a major card network."""
    n, p2, p4 = len(d), int(d[:2]), int(d[:4])
    p3, p6 = int(d[:3]), int(d[:6])
    return (
        (d[0] == "4" and n in (13, 16, 19))  # Visa
        or ((51 <= p2 <= 55 or 2221 <= p4 <= 2720) and n == 16)  # Mastercard
        or (p2 in (34, 37) and n == 15)  # Amex
        or ((p4 == 6011 or 644 <= p3 <= 649 or p2 == 65 or 622126 <= p6 <= 622925) and n >= 16)
        or (p2 == 62 and n >= 16)  # UnionPay
        or (3528 <= p4 <= 3589 and n >= 16)  # JCB
        or ((300 <= p3 <= 305 or p4 == 3095 or p2 in (36, 38, 39)) and n >= 14)  # Diners
        or ((p2 == 50 or 56 <= p2 <= 69) and n >= 12)  # Maestro
    )


TEST_CARDS = frozenset(
    {
        "4242424242424242", "4000056655665556", "4111111111111111", "4012888888881881",
        "4222222222222", "4000000000000002", "4000000000000077", "4000002500003155",
        "4000000000003220", "4000000000009995", "4917610000000000", "5555555555554444",
        "5200828282828210", "5105105105105100", "2223003122003222", "2222420000001113",
        "5425233430109903", "378282246310005", "371449635398431", "378734493671000",
        "6011111111111117", "6011000990139424", "6011981111111113", "3056930009020004",
        "36227206271667", "38520000023237", "30569309025904", "3566002020360505",
        "3530111333300000", "6200000000000005", "6200000000000047", "6250941006528599",
    }
)  # fmt: skip
"""Card numbers the networks and payment providers publish for testing."""


def basic_ok(text: str) -> bool:
    # "Basic <base64 of user:password>": what decodes to a user and a password.
    token = text.rsplit(maxsplit=1)[-1]
    try:
        decoded = base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded


_CN_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_CN_CHECK = "10X98765432"


def cn_id_ok(text: str) -> bool:
    """A Chinese resident ID: region, a real birth date, ISO 7064 MOD 11-2 check character."""
    if len(text) != 18 or not text[:17].isdigit() or text[0] not in "12345678":
        return False
    try:
        born = datetime.date(int(text[6:10]), int(text[10:12]), int(text[12:14]))
    except ValueError:
        return False
    if born.year < 1900:
        return False
    total = sum(int(c) * w for c, w in zip(text[:17], _CN_WEIGHTS, strict=True))
    return _CN_CHECK[total % 11] == text[17].upper()


def ssn_ok(text: str) -> bool:
    """A US SSN the SSA could issue: no area 000, 666 or 9xx, no group 00, no serial 0000."""
    area, group, serial = text.split("-")
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def jwt_ok(text: str) -> bool:
    """Whether the first segment is base64url of a JSON object (a JOSE header)."""
    head = text.split(".", 1)[0]
    try:
        header = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (binascii.Error, ValueError):  # ValueError covers bad UTF-8 and bad JSON
        return False
    return isinstance(header, dict)


def bearer_ok(text: str) -> bool:
    # "Bearer authentication" is prose; a credential has a digit or a symbol in it.
    token = text.rsplit(maxsplit=1)[-1]
    return not token.isalpha()


def has_digit(text: str) -> bool:
    # Real keys are random base62; "sk-learn-getting-started-guide" is not one.
    return any(c.isdigit() for c in text)
