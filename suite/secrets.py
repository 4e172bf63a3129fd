"""Secrets kept out of every record, log copy and page: names that look secret (their values
replaced), URL credentials, and the values of the suite's own secret-looking environment variables
wherever they appear in other text."""

from __future__ import annotations

import os
import re

SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API[_-]?KEY|ACCESS[_-]?KEY|CREDENTIAL|AUTH)", re.I)


REDACTED = "<redacted>"


# Env names that certainly hold a secret (a whole `_` part of the name, or a password): their


# values are kept out of the runtimes' env and searched for in any other recorded text.


SECRET_ENV = re.compile(r"(^|_)(TOKEN|SECRET|API_?KEY|ACCESS_?KEY|CREDENTIALS?|AUTH)(_|$)|PASSW(OR)?D", re.I)


# Command-line flags whose value is a secret: --api-key, --hf-token, --password (not --max-tokens).


SECRET_FLAG = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API[_-]?KEY|ACCESS[_-]?KEY|CREDENTIALS?|AUTH)$", re.I)


_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)[^/\s@]+@", re.I)


_MIN_SECRET_LEN = 8  # shorter values of secret-looking names are not searched for in other text


def _secret_values() -> list[str]:
    """Values of the suite's own secret-looking env vars (the judge key, tokens), longest first."""
    found = {v for k, v in os.environ.items()
             if (SECRET_ENV.search(k) or k.upper().endswith("TOKEN")) and len(v) >= _MIN_SECRET_LEN}
    return sorted(found, key=len, reverse=True)


def scrub(text: str) -> str:
    """Text with URL credentials (`scheme://user:pass@`) and known secret values replaced."""
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    for value in _secret_values():
        text = text.replace(value, REDACTED)
    return text


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """Env with the values of secret-looking names replaced, and secrets scrubbed from the rest."""
    return {k: (REDACTED if SECRET_NAME.search(k) else scrub(v)) for k, v in sorted(env.items())}


def redact_args(args: list[str]) -> list[str]:
    """Command line with values following secret-looking flags replaced, and secrets scrubbed."""
    out: list[str] = []
    hide_next = False
    for a in args:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if a.startswith("-") and SECRET_FLAG.search(a.split("=", 1)[0]):
            if "=" in a:
                out.append(a.split("=", 1)[0] + "=" + REDACTED)
            else:
                out.append(a)
                hide_next = True
            continue
        out.append(scrub(a))
    return out
