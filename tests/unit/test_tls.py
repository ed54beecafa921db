"""A plain-http client carries an unused, fail-closed TLS context instead of loading the CA bundle each time."""

from __future__ import annotations

import ssl
from typing import Any

import httpx
import pytest

from servectl.adapters.tls import unused_tls, verify_for
from servectl.bench.settings import BenchSettings


def test_an_http_url_gets_one_verifying_context_without_a_ca_and_others_httpx_default() -> None:
    context = verify_for("http://127.0.0.1:8180")
    assert isinstance(context, ssl.SSLContext) and context is verify_for("HTTP://engine:30000") is unused_tls()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname  # fails closed, never unverified
    assert context.cert_store_stats()["x509_ca"] == 0  # no CA bundle was loaded
    assert verify_for("https://engine:443") is True and verify_for(None) is True


def test_bench_builds_its_client_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from servectl.bench.runner import _client

    built: list[dict[str, Any]] = []
    real = httpx.Client

    def capture(*args: Any, **kwargs: Any) -> httpx.Client:
        built.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(httpx, "Client", capture)
    _client(BenchSettings(url="http://127.0.0.1:8180"), None).close()
    _client(BenchSettings(url="https://engine.example:443"), None).close()
    assert [b.get("verify") for b in built] == [unused_tls(), True]
