"""What a :class:`~skillstate.state.redact.RedactionPolicy` looks for: key names and value shapes.

**Names** (:data:`DEFAULT_NAMES`). A JSON key is sensitive when its *trailing words*
equal a name's words. Keys and names are split into lower-case words on ``_``,
``-``, ``.``, spaces, camelCase and letter/digit boundaries; trailing all-digit
words are dropped (``password2`` is ``password``). So ``access_token``,
``accessToken``, ``X-Access-Token`` and ``github_access_token`` all match, while
``tokens``, ``max_tokens``, ``view_tokens``, ``token_count``, ``tokenizer`` and
``iphone`` do not: a word is compared whole, never as a substring, and only at the
end of the key (``password_hint`` is not a password). Known false positives of the
short names: ``next_page_token`` (``token``) and a shell's ``PWD``; exempt them.

**Values** (:data:`DETECTORS`). Named regexes, each with an optional validator
(Luhn, the ID checksum and birth date, SSN ranges, a JWT header that decodes) that
turns a look-alike into a miss. Rules that keep ordinary data out:

* a token never starts inside a longer word (``task-...`` is not ``sk-...``);
* a number is taken whole: not right after or before a letter, digit or ``_``
  (``order13812345678``, a hash), not after ``+`` unless it is the E.164 detector,
  not a float's decimals (``0.13812345678``);
* a number written in groups (``4111 1111 1111 1111``, ``138-1234-5678``,
  ``078-05-1120``) must be the whole run of groups: one more ``<space or dash><digit>``
  on either side and it is left alone;
* card numbers start with 2-6 (every major network), so millisecond timestamps
  (``1715...``) are never Luhn-checked; keys (``sk-``, ``ghp_``, ``AKIA``...) have
  fixed lengths or alphabets; ``sk-`` keys need a digit and bearer values a non-letter.

Patterns are combined into one alternation (:func:`combine`), so they must not use
numbered group references, and a named group must be unique across detectors.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from skillstate.state.validators import (
    TEST_CARDS,
    basic_ok,
    bearer_ok,
    card_ok,
    cn_id_ok,
    has_digit,
    jwt_ok,
    luhn_ok,
    ssn_ok,
)

__all__ = [
    "ASSIGNMENT",
    "ASSIGNMENT_MIN",
    "CARD_CONTEXT",
    "CONTEXT_CHARS",
    "DEFAULT_NAMES",
    "DETECTORS",
    "SHALLOW_NAMES",
    "TEST_CARDS",
    "Detector",
    "NameMatcher",
    "card_ok",
    "cn_id_ok",
    "combine",
    "jwt_ok",
    "key_words",
    "luhn_ok",
    "ssn_ok",
]


@dataclass(frozen=True)
class Detector:
    """A named value shape to mask wherever it appears in text."""

    name: str
    """How users refer to it, e.g. to switch it off with ``RedactionPolicy.without``."""
    pattern: str
    """Regex source. Inline flags must be scoped, ``(?i:...)``; no numbered back-references."""
    validate: Callable[[str], bool] | None = None
    """Called with the detector's whole match; ``False`` means "a look-alike, keep it"."""
    secret_group: str | None = None
    """A named group holding the secret; only it is masked (``Bearer ***``). Default: all."""
    min_length: int = 1
    """The shortest text this can match: shorter strings are not scanned at all."""
    lead: str | None = None
    """Optional, for speed: a one-character regex (``"e"``, ``"[2-6]"``, ``"\\+"``) that
    ``pattern`` starts with. Detectors with a lead share one fast first-character scan."""
    word_start: bool = False
    """Optional, for speed: the pattern never matches right after an ASCII letter, digit or
    ``_``, so the shared scan may skip such positions before trying any alternative."""
    context: re.Pattern[str] | None = None
    """When set, a match counts only in context: written in groups (it holds a space or
    a dash), or with this pattern found in the :data:`CONTEXT_CHARS` characters before
    it or in the JSON key (or its parent key) it sits under. A card number is a card
    number in "card 4000 0566 5566 5556" or under ``payment.card``; a bare Luhn-valid
    run of digits in a reply (a tracking number, an order id) is not."""


CONTEXT_CHARS = 48
"""How far before a match :attr:`Detector.context` is looked for."""


# ---------------------------------------------------------------- value detectors

# Every built-in pattern starts with one character from its ``lead`` class, and
# checks what precedes that character *after* consuming it (``\d(?<!X\d)`` is
# ``(?<!X)\d``). The redactor joins the leads into one class that starts the
# combined regex: the regex engine then skips, in C, every position where no
# detector could start, instead of trying each alternative at every character.
_NUM_END = r"(?![0-9A-Za-z_])(?!\.\d)"  # not followed by a word char or decimals
_GROUP_END = r"(?![ -]?\d)" + _NUM_END  # a grouped number must end where its run ends
# Not inside a word, not decimals, not the digits of a "+<country>..." number.
_NOT_AFTER_NUMBER = r"(?<![0-9A-Za-z_+]{0})(?<!\d\.{0})"


def _num(lead: str, rest: str, **kw: Any) -> Detector:
    """A number starting with ``lead`` that is not part of a longer word or decimals."""
    pattern = lead + _NOT_AFTER_NUMBER.format(lead) + rest
    return Detector(pattern=pattern, lead=lead, word_start=True, **kw)


def _tok(literal: str, rest: str, before: str = "0-9A-Za-z_-", **kw: Any) -> Detector:
    """A token starting with ``literal`` that is not glued to the end of a longer token."""
    head = literal[0]
    body = re.escape(literal[1:])
    pattern = f"{head}(?<![{before}]{head}){body}{rest}"
    return Detector(pattern=pattern, lead=head, word_start=True, **kw)


CARD_CONTEXT = re.compile(
    r"(?i:card|visa|master|amex|american express|discover|diners|jcb|union ?pay|maestro"
    r"|credit|debit|payment|(?<![a-z])(?:cc|ccn|cvv|pan)(?![a-z]))|卡|信用|借记|支付"
)
"""Words that make a Luhn-valid number a card number (:attr:`Detector.context`)."""

DETECTORS: tuple[Detector, ...] = (
    Detector(
        # A private key in PEM form (also cut short, as in a summary): the body goes,
        # the armour lines stay, so a reader sees what was there.
        name="private_key",
        pattern=r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"(?P<pem_body>[\s\S]+?)(?=-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|\Z)",
        secret_group="pem_body",
        min_length=32,
        lead="-",
    ),
    Detector(
        # Credentials in a URL: scheme://user:password@host. Only the password goes.
        name="url_credentials",
        pattern=r":(?<=[A-Za-z0-9+.-]:)//[^\s:/?#@\"'<>]{0,128}:"
        r"(?P<url_password>[^\s/?#@\"'<>]{1,256})@(?=[\w\[.-])",
        secret_group="url_password",
        min_length=8,
        lead=":",
    ),
    Detector(
        name="basic_auth",
        pattern=r"[Bb](?<![0-9A-Za-z_-][Bb])(?i:asic)[ \t]+(?P<basic_token>[A-Za-z0-9+/]{8,}={0,2})"
        r"(?![A-Za-z0-9+/=])",
        validate=basic_ok,
        secret_group="basic_token",
        min_length=14,
        lead="[Bb]",
        word_start=True,
    ),
    Detector(
        name="bearer",
        pattern=r"[Bb](?<![0-9A-Za-z_-][Bb])(?i:earer)[ \t]+"
        r"(?P<bearer_token>[A-Za-z0-9._~+/-]{16,}=*)",
        validate=bearer_ok,
        secret_group="bearer_token",
        min_length=23,
        lead="[Bb]",
        word_start=True,
    ),
    _tok(
        "eyJ",
        r"[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*(?![A-Za-z0-9_-])",
        name="jwt",
        validate=jwt_ok,
        min_length=16,
    ),
    _tok(
        "sk-",
        r"(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
        name="openai_key",
        validate=has_digit,
        min_length=23,
    ),
    _tok(
        "g",
        r"(?:h[pousr]_[A-Za-z0-9]{36,255}|ithub_pat_[A-Za-z0-9_]{22,255})",
        before="0-9A-Za-z_",
        name="github_token",
        min_length=33,
    ),
    _tok(
        "A",
        r"(?:KIA|SIA)[A-Z0-9]{16}(?![0-9A-Za-z])",
        before="0-9A-Za-z",
        name="aws_access_key",
        min_length=20,
    ),
    _tok("xox", r"[abposr]-[A-Za-z0-9-]{10,}", name="slack_token", min_length=15),
    Detector(
        name="stripe_key",
        pattern=r"[sr](?<![0-9A-Za-z_][sr])k_(?:live|test)_[A-Za-z0-9]{16,}",
        min_length=24,
        lead="[sr]",
        word_start=True,
    ),
    _tok("AIza", r"[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])", name="google_api_key", min_length=39),
    _tok("glpat-", r"[0-9A-Za-z_-]{20,}", name="gitlab_token", min_length=26),
    _tok("hf_", r"[A-Za-z0-9]{30,40}(?![A-Za-z0-9])", name="huggingface_token", min_length=33),
    _tok("npm_", r"[A-Za-z0-9]{36}(?![A-Za-z0-9])", name="npm_token", min_length=40),
    _tok(
        "SG.",
        r"[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])",
        name="sendgrid_key",
        min_length=69,
    ),
    Detector(
        # E.164: "+", country code, subscriber number; 8 to 15 digits in all, single
        # spaces or dashes allowed between them ("+1 415 555 2671").
        name="phone_e164",
        pattern=r"\+(?<![0-9A-Za-z_+]\+)[1-9](?:[ -]?\d){7,14}" + _GROUP_END,
        min_length=9,
        lead=r"\+",
        word_start=True,
    ),
    _num("[1-8]", r"\d{16}[\dXx]" + _NUM_END, name="cn_id", validate=cn_id_ok, min_length=18),
    _num(
        r"\d",
        r"(?<!\d[ -]\d)\d\d-\d\d-\d{4}" + _GROUP_END,
        name="us_ssn",
        validate=ssn_ok,
        min_length=11,
    ),
    _num(
        # Mainland mobiles: 1[3-9] then 9 digits, bare or written 3-4-4.
        "1",
        r"[3-9]\d(?:\d{8}" + _NUM_END + r"|(?<!\d[ -]\d{3})[ -]\d{4}[ -]\d{4}" + _GROUP_END + ")",
        name="phone_cn",
        min_length=11,
    ),
    _num(
        # Issuer prefixes of all major networks start with 2-6 (Visa 4, Mastercard
        # 2/5, Amex 3, Discover/UnionPay 6): this keeps millisecond timestamps out.
        "[2-6]",
        r"(?:\d{12,18}"
        + _NUM_END
        + r"|(?<!\d[ -]\d)\d{3}(?:[ -]\d{4}){2}[ -]\d{1,7}"  # 4-4-4-n
        + _GROUP_END
        + r"|(?<!\d[ -]\d)\d{3}[ -]\d{6}[ -]\d{4,5}"  # 4-6-5 (Amex), 4-6-4 (Diners)
        + _GROUP_END
        + ")",
        name="card_number",
        validate=card_ok,
        context=CARD_CONTEXT,
        min_length=13,
    ),
)
"""The built-in value detectors, in the order they are tried at each position."""


# ---------------------------------------------------------------- combining

# ``name=value``, ``name: value``, ``"name": "value"`` in free text; the redactor
# checks the key with the name rules. The value is quoted text or one bare token
# after an optional auth scheme (kept). The key is taken atomically (look-ahead plus
# back-reference), so a long word is not re-tried at every length when no ``:`` or
# ``=`` follows it.
ASSIGNMENT = re.compile(
    r"[A-Za-z](?<![A-Za-z0-9_.-][A-Za-z])(?=(?P<key>[A-Za-z0-9_.-]{0,63}))(?P=key)"
    r"[\"']?[ \t]*[:=][ \t]*"
    r"(?:\"(?P<dq>(?:[^\"\\\n]|\\.){1,256})\"|'(?P<sq>[^'\n]{1,256})'"
    r"|(?i:(?:bearer|basic|token|digest)[ \t]+)?(?P<bare>[^\s\"'&;,=][^\s\"'&;,]*))"
)
ASSIGNMENT_MIN = 8
"""Shorter text is not checked for :data:`ASSIGNMENT`: ``pin=1234`` is the shortest worth it."""

_LEAD = re.compile(r"\\.|[^\\\[\](){}.*+?^$|]|\[[^\^\[\]\\][^\[\]]*\]")
"""A lead the fast scan can use: one literal character, one escape, or a plain class."""


def combine(detectors: tuple[Detector, ...]) -> tuple[re.Pattern[str], ...]:
    """The regexes that find every detector's candidates; alternative ``_<i>`` is detector i.

    Detectors with a usable :attr:`~Detector.lead` share a regex that starts with
    the class of all their leads: the regex engine then skips, in C, every position
    where none of them could start (``word_start`` ones also skip positions inside a
    word before trying any alternative). The rest share a plain alternation.
    Raises :class:`re.error` when a pattern does not compile.
    """
    led = [
        i
        for i, d in enumerate(detectors)
        if d.lead and _LEAD.fullmatch(d.lead) and d.pattern.startswith(d.lead)
    ]
    groups = (
        ([i for i in led if detectors[i].word_start], "(?<![0-9A-Za-z_].)"),
        ([i for i in led if not detectors[i].word_start], ""),
    )
    out: list[re.Pattern[str]] = []
    for indices, guard in groups:
        if indices:
            leads = "".join(_class_body(detectors[i].lead or "") for i in indices)
            # The class consumed the lead: each alternative checks its own by look-behind.
            alts = "|".join(_after_lead(i, detectors[i]) for i in indices)
            out.append(re.compile(f"[{leads}]{guard}(?:{alts})"))
    rest = [i for i in range(len(detectors)) if i not in led]
    if rest:
        out.append(re.compile("|".join(f"(?P<_{i}>{detectors[i].pattern})" for i in rest)))
    return tuple(out)


def _after_lead(i: int, d: Detector) -> str:
    lead = d.lead or ""
    return f"(?P<_{i}>(?<={lead}){d.pattern[len(lead) :]})"


def _class_body(lead: str) -> str:
    """``lead`` as it goes inside ``[...]``."""
    return lead[1:-1] if lead.startswith("[") else lead


# ---------------------------------------------------------------- names

DEFAULT_NAMES: tuple[str, ...] = (
    # credentials
    "access_token", "refresh_token", "id_token", "auth_token", "api_token", "bearer_token",
    "session_token", "token", "api_key", "apikey",
    "access_key", "secret_key", "secret", "client_secret", "password", "passwd", "pwd",
    "passphrase", "credential", "credentials", "authorization", "cookie", "cookies",
    "set-cookie", "session_id", "sessionid", "private_key", "otp", "pin",
    # contact and identity
    "phone", "user_phone", "mobile", "phone_number", "cellphone", "telephone",
    "id_card", "idcard", "id_number", "id_no", "national_id", "ssn",
    "social_security_number", "passport", "passport_number",
    # payment
    "card_number", "credit_card", "cvv", "cvc", "iban", "account_number", "bank_account",
)  # fmt: skip
"""Key names masked by default (matched by trailing words, see the module docstring)."""

SHALLOW_NAMES: tuple[str, ...] = (
    "token", "otp", "pin", "session_id", "sessionid",
    "phone", "user_phone", "mobile", "phone_number", "cellphone", "telephone",
    "id_card", "idcard", "id_number", "id_no", "national_id", "ssn",
    "social_security_number", "passport", "passport_number",
    "card_number", "credit_card", "cvv", "cvc", "iban", "account_number", "bank_account",
)  # fmt: skip
"""Names whose *structured* values are not secret as a whole: the name masks a plain
value (``"phone": "+1 415..."``), but an object under it is judged key by key and
value by value (``"credit_card": {"brand": "visa", "last4": "4242"}`` stays
readable; a card number inside it is still masked by its shape). Every other name is
a credential: everything under it is masked, leaf by leaf (the structure stays)."""

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+|[^\W\d_A-Za-z]+")


def key_words(key: str) -> tuple[str, ...]:
    """``key`` as lower-case words: ``"X-APIKey2"`` -> ``("x", "api", "key")``."""
    words = [w.lower() for w in _WORD.findall(key)]
    while words and words[-1].isdigit():
        words.pop()
    return tuple(words)


NOT_SENSITIVE, SHALLOW, DEEP = 0, 1, 2
"""What :class:`NameMatcher` answers for a key: not sensitive; a :data:`SHALLOW_NAMES`
name (a plain value under it is masked); a credential (everything under it is)."""


class NameMatcher(dict[str, int]):
    """Answers ``matcher[key]``: is this key sensitive, and how? Remembered per key string.

    A key is sensitive when its trailing words equal some name's words and no
    exempt name's words: :data:`DEEP` when one of the names it matches is not
    ``shallow``, else :data:`SHALLOW`; :data:`NOT_SENSITIVE` (0, falsy) otherwise. It
    is a dict that fills itself (``__missing__``): keys of JSON documents repeat
    endlessly (every event has the same few dozen), so after warm-up a check is one
    dictionary lookup done in C.
    """

    _LIMIT = 65536  # distinct keys remembered; a runaway key space just starts over

    def __init__(
        self, names: tuple[str, ...], exempt: tuple[str, ...] = (), shallow: tuple[str, ...] = ()
    ) -> None:
        super().__init__()
        flat = {key_words(n) for n in shallow}
        self._names = self._index(tuple(n for n in names if key_words(n) not in flat))
        self._shallow = self._index(tuple(n for n in names if key_words(n) in flat))
        self._exempt = self._index(exempt)
        self.active = bool(self._names) or bool(self._shallow)
        """Whether any name can match at all."""

    @staticmethod
    def _index(names: tuple[str, ...]) -> dict[str, tuple[tuple[str, ...], ...]]:
        """Name word-tuples grouped by their last word, for a single lookup per key."""
        out: dict[str, list[tuple[str, ...]]] = {}
        for name in names:
            words = key_words(name)
            if not words:
                raise ValueError(f"redaction name {name!r} has no letters to match")
            out.setdefault(words[-1], []).append(words)
        return {last: tuple(group) for last, group in out.items()}

    def __missing__(self, key: str) -> int:
        words = key_words(key)
        hit = NOT_SENSITIVE
        if not self._ends(words, self._exempt):
            if self._ends(words, self._names):
                hit = DEEP
            elif self._ends(words, self._shallow):
                hit = SHALLOW
        if len(self) >= self._LIMIT:
            self.clear()
        self[key] = hit
        return hit

    @staticmethod
    def _ends(words: tuple[str, ...], index: dict[str, tuple[tuple[str, ...], ...]]) -> bool:
        if not words:
            return False
        return any(words[-len(n) :] == n for n in index.get(words[-1], ()))
