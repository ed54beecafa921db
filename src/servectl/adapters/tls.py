"""The TLS context an httpx client of a plain-``http://`` URL is given, so that it builds none it never uses.

httpx builds its default verifying context (certifi's CA bundle: ``load_verify_locations``, about 90 ms) for
every ``httpx.Client``, whatever the URL. bench made one client per measured point and the health gate one per
start, so a campaign paid it on every visit (measured: ``benchmarks/bench_campaign_overhead.py``). A client
whose URL is ``http://`` gets :func:`unused_tls` instead: a client context with verification on (certificates
required, host names checked) and no CA loaded, built once per process; were it ever used for an ``https://``
URL it would refuse every certificate - it fails closed, it never skips verification. Any other URL keeps
httpx's default (``True``: its own context, which honours ``SSL_CERT_FILE``).
"""

from __future__ import annotations

import ssl
from functools import lru_cache


@lru_cache(maxsize=1)
def unused_tls() -> ssl.SSLContext:
    """A verifying client context with no CA: what a plain-http client carries unused (see the module docstring)."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname by default


def verify_for(url: str | None) -> ssl.SSLContext | bool:
    """httpx's ``verify=`` for a client of ``url``: :func:`unused_tls` for ``http://``, else True (httpx's own)."""
    return unused_tls() if url is not None and url.lower().startswith("http://") else True
