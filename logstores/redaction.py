"""Keeping credentials out of everything shown: ``repr``, log records, error messages, CLI output.

One module, used by every store and by the command line:

* :func:`redact` copies a configuration or options mapping with every credential replaced by
  ``***``, recursively: nested mappings and lists, JSON objects held in string values
  (``client_kwargs={"aws_secret_access_key": ...}``), and URLs carrying userinfo or signatures;
* :func:`redact_url` is the URI as shown: without the userinfo password (``user:password@``, also
  one holding ``/``, ``@`` or ``+``) and with signature query values replaced;
* :func:`secret_values` collects the credential strings a configuration holds, so that
  :func:`scrub` (and :class:`SecretFilter`, a :class:`logging.Filter`) can remove them from any
  text, such as a third-party SDK's message or a traceback.

A key is a credential when its name says so (:func:`is_secret_key`: ``secret``, ``password``,
``token``, ``key``, ``credential``, ``sas``, ``connection_string``), except class names and key
file paths.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from logstores.errors import LogStoreConfError

REDACTED = "***"
SECRET_MARKERS = ("secret", "password", "token", "key", "credential", "sas", "connection_string")
_NOT_SECRET_SUFFIXES = ("_impl", "logstore_class", "keyfile_path")
_SIGNATURE_PARAMS = frozenset({"sig", "signature", "x-amz-signature", "x-goog-signature"})
_MIN_SECRET_LENGTH = 4

_USERINFO = re.compile(
    r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^/\s@?#:'\"]*):(?P<password>[^\s'\"]*)@"
)
"""``scheme://user:password@`` (userinfo with a password) anywhere in a text. The password runs to
the last ``@`` before a blank or a quote: a raw ``/``, ``@`` or ``?`` in it (AWS secrets hold ``/``
and ``+``) would end a URL parser's authority early and leave the rest of the secret in the path."""
_PORT_AND_PATH = re.compile(r"\d+/")
_HTTP_USERINFO = re.compile(r"(?P<scheme>\bhttps?://)(?P<userinfo>[^/\s@?#:]+)@")
"""``http(s)://token@`` (a bare user part, often a token) in a text."""
_QUERY_SECRET = re.compile(
    r"(?P<name>[?&;](?:sig|signature|x-amz-signature|x-amz-security-token|x-goog-signature)=)[^&\s\"';]+",
    re.IGNORECASE,
)
_CONNECTION_STRING_SECRET = re.compile(
    r"(?P<name>(?:AccountKey|SharedAccessSignature|SharedAccessKey)=)[^;\s\"']+", re.IGNORECASE
)


def is_secret_key(key: str) -> bool:
    """Whether a configuration key or option name may hold a credential."""
    lowered = key.lower().replace(".", "_").replace("-", "_")
    if lowered.endswith(_NOT_SECRET_SUFFIXES):
        return False
    return any(marker in lowered for marker in SECRET_MARKERS)


def redact_url(url: str) -> str:
    """The URL or URI as shown: no userinfo password, signature or token query values ``***``.

    The one function that turns a URI into what errors, log records, ``repr`` and the command line
    show. ``user:password@`` is removed from any URI (``s3a://KEY:SECRET@bucket/t`` ->
    ``s3a://bucket/t``), also when the password holds a raw ``/``, ``@`` or ``+``; a user part
    without a password is kept (``abfss://container@account...`` keeps its container), except in
    ``http(s)`` URLs, where a bare user part is often a token.
    """
    url = _strip_userinfo(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return scrub(url)
    query = parts.query
    if not query:
        return url
    pairs = parse_qsl(query, keep_blank_values=True)
    query = urlencode(
        [(name, REDACTED if _is_secret_param(name) else value) for name, value in pairs], safe="*"
    )
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def has_userinfo_secret(uri: str) -> bool:
    """Whether ``uri`` carries a credential in its userinfo (what :func:`redact_url` removes)."""
    return "@" in uri and _strip_userinfo(uri) != uri


def refuse_userinfo_secret(uri: str) -> None:
    """Raise :class:`~logstores.errors.LogStoreConfError` naming ``redact_url(uri)`` if the URI
    carries a credential in its userinfo.

    No store takes credentials from a URI (each filesystem gets them from the configuration), so
    such a URI would only reach the storage SDK as part of a bucket or path name, and its error
    would show the secret. Hadoop's S3A connector refuses these URIs for the same reason.
    """
    if has_userinfo_secret(uri):
        raise LogStoreConfError(
            f"{redact_url(uri)}: the URI carries login details (user:password@ before the host), "
            "which are not supported: give credentials in the configuration instead "
            "(fs.s3a.access.key and fs.s3a.secret.key, fs.azure.account.key.<account>..., "
            "fs.gs.auth.service.account.json.keyfile, or spark.delta.logStore.<scheme>.options.*)"
        )


def _strip_userinfo(text: str) -> str:
    text = _USERINFO.sub(_without_password, text)
    return _HTTP_USERINFO.sub(r"\g<scheme>", text)


def _without_password(match: re.Match[str]) -> str:
    if _is_host_and_port(match.group("user"), match.group("password")):
        return match.group(0)
    return match.group("scheme")


def _is_host_and_port(user: str, password: str) -> bool:
    """``host.example:9000/path@x``: a host, a port and an ``@`` in the path, not a password."""
    host = user.lower()
    return ("." in host or host == "localhost") and _PORT_AND_PATH.match(password) is not None


def _is_secret_param(name: str) -> bool:
    return name.lower() in _SIGNATURE_PARAMS or is_secret_key(name)


def redact(options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``options`` with every credential replaced by ``'***'``, at any depth."""
    return {key: _redact_value(str(key), value) for key, value in options.items()}


def _redact_value(key: str, value: Any) -> Any:
    if is_secret_key(key) and value not in (None, "", False):
        return REDACTED
    if isinstance(value, Mapping):
        return redact(value)
    if isinstance(value, list | tuple):
        return type(value)(_redact_value("", item) for item in value)
    if isinstance(value, str):
        return _redact_string(value)
    return value


def _redact_string(value: str) -> str:
    stripped = value.strip()
    if stripped[:1] in ("{", "["):
        try:
            parsed = json.loads(stripped)
        except ValueError:
            return scrub(value)
        return json.dumps(_redact_value("", parsed), separators=(",", ":"))
    if "://" in stripped and not any(char.isspace() for char in stripped):
        return redact_url(stripped)
    return scrub(value)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with URL userinfo, signature query values, connection-string keys and ``secrets`` removed."""
    text = _strip_userinfo(text)
    text = _QUERY_SECRET.sub(rf"\g<name>{REDACTED}", text)
    text = _CONNECTION_STRING_SECRET.sub(rf"\g<name>{REDACTED}", text)
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= _MIN_SECRET_LENGTH:
            text = text.replace(secret, REDACTED)
    return text


def secret_values(conf: Mapping[str, Any]) -> set[str]:
    """Every credential string in ``conf``: values of secret keys, at any depth, and URL passwords."""
    found: set[str] = set()
    for key, value in conf.items():
        _collect(str(key), value, found)
    return {secret for secret in found if len(secret) >= _MIN_SECRET_LENGTH}


def _collect(key: str, value: Any, found: set[str]) -> None:
    if isinstance(value, Mapping):
        for name, item in value.items():
            _collect(str(name), item, found)
        return
    if isinstance(value, list | tuple):
        for item in value:
            _collect("", item, found)
        return
    if not isinstance(value, str) or not value:
        return
    if is_secret_key(key):
        found.add(value)
        found.update(match.group(0).split("=", 1)[1] for match in _CONNECTION_STRING_SECRET.finditer(value))
    stripped = value.strip()
    if stripped[:1] in ("{", "["):
        with contextlib.suppress(ValueError):
            _collect("", json.loads(stripped), found)
    for match in _USERINFO.finditer(value):
        if not _is_host_and_port(match.group("user"), match.group("password")):
            found.add(match.group("password"))
    for match in _HTTP_USERINFO.finditer(value):
        found.add(match.group("userinfo"))


class SecretFilter(logging.Filter):
    """Scrubs every record passing through a handler: its message, arguments and traceback text.

    Install it on the handlers of an application that prints logs of third-party SDKs as well
    (the ``deltalog`` command does): ``handler.addFilter(SecretFilter(secret_values(conf)))``.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = frozenset(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = scrub(record.getMessage(), self.secrets)
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            formatter = logging.Formatter()
            record.exc_text = scrub(formatter.formatException(record.exc_info), self.secrets)
            record.exc_info = None
        if record.stack_info:
            record.stack_info = scrub(record.stack_info, self.secrets)
        return True
