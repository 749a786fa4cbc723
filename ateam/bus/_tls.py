"""TLS for ``rediss://`` targets: the CA, the client certificate (mTLS), and refusals.

Two places can name the files, with the same meaning:

* ``tools.yaml`` ``transport``: ``ca_file``, ``cert_file``, ``key_file`` (relative paths
  are resolved against the ``.ateam/`` that sets them), applied to whichever URL wins;
* the URL's query: ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile`` (redis-py's names),
  for a URL given alone (``--redis``, ``ATEAM_REDIS_URL``). A file named in the URL
  wins over the one in ``tools.yaml``.

The files are checked before any connection, so a typo is a configuration error naming
the file, not a TLS failure. A server that refuses the client (no certificate, or one
its CA did not sign) is told apart from an unreachable one (:func:`tls_refusal`).
"""

from __future__ import annotations

import errno
import ssl
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from ateam.errors import (
    BusError,
    ConfigError,
    RedisUnavailable,
    TlsClientRefused,
    UsageError,
)

__all__ = ["TLS_QUERY", "check_url", "tls_closed_early", "tls_options", "tls_refusal"]

TLS_QUERY = {"ssl_ca_certs": "ca_file", "ssl_certfile": "cert_file", "ssl_keyfile": "key_file"}
"""URL query parameter -> the ``tools.yaml`` field of the same meaning."""


class _TlsTarget(Protocol):
    """What is read of a ``RedisTarget`` (declared here so this module needs no import of it)."""

    @property
    def url(self) -> str: ...
    @property
    def ca_file(self) -> str | None: ...
    @property
    def cert_file(self) -> str | None: ...
    @property
    def key_file(self) -> str | None: ...


def _query(url: str) -> dict[str, str]:
    return {k: v for k, v in parse_qsl(urlsplit(url).query) if k in TLS_QUERY}


def check_url(url: str) -> None:
    """Refuse TLS query parameters on a URL that is not ``rediss://``.

    Raises:
        UsageError: ``ssl_certfile`` (or another) on ``redis://`` or ``unix://``.
    """
    given = _query(url)
    if given and urlsplit(url).scheme != "rediss":
        raise UsageError(f"{', '.join(sorted(given))} in a Redis URL need a rediss:// URL")


def tls_options(target: _TlsTarget) -> dict[str, Any]:
    """redis-py's ``ssl_*`` keyword arguments for ``target`` (empty unless ``rediss://``).

    Raises:
        ConfigError: A named file does not exist, or a key is given without a certificate.
    """
    if urlsplit(target.url).scheme != "rediss":
        return {}
    query = _query(target.url)
    files = {
        field: query.get(param) or getattr(target, field) for param, field in TLS_QUERY.items()
    }
    for field, path in files.items():
        if path and not Path(path).is_file():
            raise ConfigError(f"TLS file {path} does not exist", field=f"transport.{field}")
    if files["key_file"] and not files["cert_file"]:
        raise ConfigError(
            "a TLS key_file needs its cert_file (the client certificate)",
            field="transport.cert_file",
        )
    # Passed as keywords; the URL's own query wins over them inside redis-py anyway.
    names = {field: param for param, field in TLS_QUERY.items()}
    return {names[field]: path for field, path in files.items() if path}


def tls_refusal(exc: BaseException, target: _TlsTarget, where: str) -> BusError | None:
    """The error for a TLS failure of the first command to ``target``, or ``None``.

    Args:
        exc: What the first PING raised.
        target: The target it was sent to.
        where: The masked URL, for the message.

    Returns:
        :class:`TlsClientRefused` (final: retrying cannot help) when the server refused
        the client's certificate or wanted one; :class:`RedisUnavailable` when the
        client could not verify the server; ``None`` for any other failure.
    """
    if urlsplit(target.url).scheme != "rediss":
        return None
    chain = _chain(exc)
    reasons = " ".join(str(getattr(e, "reason", "") or "") for e in chain).upper()
    if any(isinstance(e, ssl.SSLCertVerificationError) for e in chain):
        return RedisUnavailable(
            f"cannot verify the TLS certificate of Redis at {where}: {_first_line(chain)}; "
            "set transport.ca_file (or ssl_ca_certs in the URL) to the CA that signed it"
        )
    has_cert = bool(_query(target.url).get("ssl_certfile") or target.cert_file)
    if "UNKNOWN_CA" in reasons or "BAD_CERTIFICATE" in reasons:
        return TlsClientRefused(
            f"Redis at {where} refused our TLS client certificate (not signed by a CA it "
            f"trusts): {_first_line(chain)}"
        )
    closed = _closed(chain)
    if "CERTIFICATE_REQUIRED" in reasons or (closed and not has_cert):
        return TlsClientRefused(
            f"Redis at {where} requires a TLS client certificate and none was given"
        )
    if closed:
        return TlsClientRefused(
            f"Redis at {where} refused our TLS client certificate (it closed every TLS "
            f"connection: not signed by a CA it trusts?): {_first_line(chain)}"
        )
    return None


def tls_closed_early(exc: BaseException, target: _TlsTarget) -> bool:
    """True when a TLS server closed the client's first connection without a reason.

    That is how a server refusing the client's certificate (or the lack of one) may
    answer under TLS 1.3, and also what a server restart or a dropped link looks like:
    the caller tries once more before :func:`tls_refusal` calls it a refusal.
    """
    return urlsplit(target.url).scheme == "rediss" and _closed(_chain(exc))


_CLOSED_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE})


def _closed(chain: list[BaseException]) -> bool:
    # TLS 1.3 checks the client's certificate after the handshake: the server's alert
    # and its closing of the connection race, so the first command sees either.
    if any(isinstance(e, ConnectionResetError | BrokenPipeError | EOFError) for e in chain):
        return True
    # redis-py words some of them itself, keeping only the errno ("Error 32 connecting").
    if any(getattr(e, "errno", None) in _CLOSED_ERRNOS for e in chain):
        return True
    return "CLOSED BY SERVER" in " ".join(str(e) for e in chain).upper()


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _first_line(chain: list[BaseException]) -> str:
    innermost = chain[-1]
    return " ".join(str(innermost).split()) or type(innermost).__name__
