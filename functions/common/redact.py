"""Credentials never leave in a message: URL user-info and credential-looking query values.

ARCHITECTURE.md: credentials travel as Secret references and are mounted; they never
appear in a status, a condition, an event or a log. Validation refuses an endpoint that
carries one (`url_credentials`), and every text that may quote user input on its way out
(an unexpected exception's message, a log line) passes through `redact` first, so a
refusal can never echo the secret it refuses.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import parse_qsl, urlsplit

REDACTED: Final = "<redacted>"

# Query parameter names that carry a credential in the wild (AWS presigned URLs, Azure
# SAS tokens, Grafana/Datadog/Honeycomb keys, OAuth). Matched as a whole name, ignoring
# case, after dropping `-`/`_`/`.` so `api-key`, `api_key` and `apiKey` are one name.
_CREDENTIAL_PARAMS: Final = frozenset(
    {
        "apikey",
        "key",
        "accesskey",
        "accesskeyid",
        "secret",
        "secretkey",
        "clientsecret",
        "token",
        "accesstoken",
        "authtoken",
        "refreshtoken",
        "idtoken",
        "bearer",
        "auth",
        "authorization",
        "password",
        "passwd",
        "pwd",
        "pass",
        "sig",
        "signature",
        "xamzsignature",
        "xamzcredential",
        "xamzsecuritytoken",
        "sessiontoken",
        "credential",
        "credentials",
        "privatekey",
        "dd-api-key",
        "ddapikey",
        "license",
        "licensekey",
    }
)
_CREDENTIAL_PARAM_HINT: Final = re.compile(
    r"(?i)(key|secret|token|passw|pwd|signature|credential|auth)"
)

# `scheme://user[:password]@` anywhere in a text.
_USERINFO_RE: Final = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s?#@]*@")
# `name=value` after `?` or `&` (or `;`), where the name looks like a credential.
_QUERY_PAIR_RE: Final = re.compile(r"([?&;])([^=&#\s'\"]+)=([^&#\s'\"]*)")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]", "", name).lower()


def is_credential_param(name: str) -> bool:
    """A query parameter whose value is, by its name, a credential."""
    normalized = _normalized(name)
    return normalized in _CREDENTIAL_PARAMS or bool(_CREDENTIAL_PARAM_HINT.search(normalized))


def url_credentials(url: str) -> list[str]:
    """What in `url` is a credential, named without its value (empty when none).

    ["user-info"] for `https://u:p@host`, ["query parameter 'token'"] for `?token=…`.
    A parameter name is quoted only when it is short and plain, so even a name can not
    smuggle a value into the message.
    """
    found: list[str] = []
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
    except ValueError:
        parts, netloc = None, ""
    if "@" in netloc or _USERINFO_RE.search(url):
        found.append("user-info (user:password@)")
    query = parts.query if parts is not None else url.partition("?")[2]
    for name, _value in parse_qsl(query, keep_blank_values=True):
        if is_credential_param(name):
            shown = name if re.fullmatch(r"[A-Za-z0-9_.-]{1,32}", name) else "…"
            found.append(f"query parameter {shown!r}")
    return found


def redact(text: str) -> str:
    """`text` with URL user-info and credential-looking query values replaced."""
    text = _USERINFO_RE.sub(lambda m: f"{m[1]}{REDACTED}@", text)
    return _QUERY_PAIR_RE.sub(
        lambda m: f"{m[1]}{m[2]}={REDACTED}" if is_credential_param(m[2]) else m[0], text
    )


# Free text that may hold a credential (a container's termination message: its own output,
# FallbackToLogsOnError's log tail): `name=value` / `name: value` where the name looks like
# a credential (HF_TOKEN=…, "api_key": "…", Password: …), an HTTP authorization scheme's
# token (Bearer …, Basic …), and token shapes that are credentials whatever surrounds them
# (JWTs, provider-prefixed keys, AWS access key ids, PEM private keys).
_TEXT_NAME_RE: Final = re.compile(
    r"(?i)(?<![a-z0-9_.-])[\"']?([a-z][a-z0-9_.-]{0,63})[\"']?\s*[=:]\s*"
)
_TEXT_VALUE_RE: Final = re.compile(r"\"[^\"\n]*\"|'[^'\n]*'|[^\s,;&\"'}\]]+")
# In free text a name counts when it is a credential's name or ends like one (HF_TOKEN,
# db_password, OPENAI_API_KEY), not when it merely contains one (tokenizer, num_tokens).
_CREDENTIAL_SUFFIXES: Final = (
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "accesskey",
    "secretkey",
    "privatekey",
    "credential",
    "credentials",
    "authorization",
    "signature",
)
_AUTH_SCHEMES: Final = frozenset({"bearer", "basic", "token"})
_AUTH_SCHEME_RE: Final = re.compile(r"(?i)\b(bearer|basic|token)(\s+)([A-Za-z0-9._~+/=-]{8,})")
_TOKEN_SHAPES: Final = re.compile(
    r"""(?x)
    \beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}   # a JWT
    | \b(?:hf|sk|pk|rk|ghp|gho|ghu|ghs|ghr|glpat|xox[abprs]|AIza)[_-][A-Za-z0-9_-]{12,}
    | \b(?:AKIA|ASIA)[A-Z0-9]{16}\b
    | -----BEGIN[A-Z ]*PRIVATE\ KEY-----[\s\S]*?(?:-----END[A-Z ]*PRIVATE\ KEY-----|$)
    """
)


def redact_text(text: str) -> str:
    """`text` (free text such as a termination message) with every credential-looking
    value replaced: what `redact` replaces in URLs, plus credential-named pairs, tokens
    after an authorization scheme, and well-known token shapes."""
    text = redact(text)
    text = _TOKEN_SHAPES.sub(REDACTED, text)
    text = _AUTH_SCHEME_RE.sub(lambda m: f"{m[1]}{m[2]}{REDACTED}", text)

    out, at = [], 0
    for m in _TEXT_NAME_RE.finditer(text):
        if m.start() < at:
            continue  # inside a value already replaced
        name = _normalized(m[1])
        if not (name in _CREDENTIAL_PARAMS or name.endswith(_CREDENTIAL_SUFFIXES)):
            continue
        value = _TEXT_VALUE_RE.match(text, m.end())
        if value is None:
            continue
        raw = value[0].strip("\"'")
        if raw in ("", REDACTED) or raw.lower() in _AUTH_SCHEMES:
            continue
        quote = value[0][0] if value[0][0] in "\"'" else ""
        out += [text[at : m.end()], f"{quote}{REDACTED}{quote}"]
        at = value.end()
    return "".join(out) + text[at:]
