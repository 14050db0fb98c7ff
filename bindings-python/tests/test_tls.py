"""Client certificates (mutual TLS) from Python: ``tls_client_cert`` and
``tls_client_key`` against a server started with ``--tls-client-ca``. The
certificates come from ``ticketing-server gen-certs``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import ticketing
from conftest import Server, server_bin


def test_client_certificate_against_a_server_that_requires_one(tmp_path: Path, key: str) -> None:
    certs = tmp_path / "certs"
    subprocess.run([str(server_bin()), "gen-certs", "--dir", str(certs), "--nodes", "1"], check=True,
                   capture_output=True, timeout=60)
    srv = Server({
        "TICKETING_TLS_CERT": str(certs / "node1.pem"),
        "TICKETING_TLS_KEY": str(certs / "node1-key.pem"),
        "TICKETING_TLS_CLIENT_CA": str(certs / "ca.pem"),
    }, tls=True)
    ca = str(certs / "ca.pem")
    try:
        # A path-like object and a string both work.
        with ticketing.TicketBroker([srv.addr], tls=ca, tls_client_cert=certs / "client.pem",
                                    tls_client_key=str(certs / "client-key.pem")) as b:
            assert b.wait_ready(10)
            with b.lock(key, 1, 5) as t:
                assert t.token > 0
        # Without a client certificate the server refuses the TLS handshake.
        with ticketing.TicketBroker([srv.addr], tls=ca) as b:
            assert not b.wait_ready(1)
            with pytest.raises(ticketing.UnavailableError):
                b.acquire(key, 0, 5)
        with pytest.raises(ValueError, match="tls is off"):
            ticketing.TicketBroker([srv.addr], tls_client_cert=certs / "client.pem",
                                   tls_client_key=certs / "client-key.pem")
        with pytest.raises(ValueError, match="together"):
            ticketing.TicketBroker([srv.addr], tls=ca, tls_client_cert=certs / "client.pem")
    finally:
        srv.stop()
