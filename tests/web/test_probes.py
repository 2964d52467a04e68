"""The orchestrator's probes: answered by pod IP and over plain HTTP, whatever the
allowed hosts and the HTTPS redirect say; ``/ready`` follows the database."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client

pytestmark = pytest.mark.django_db(transaction=True)


def test_probes_answer_a_kubelet_by_pod_ip_over_plain_http(settings):
    settings.SECURE_SSL_REDIRECT = True
    client = Client(HTTP_HOST="10.12.3.4:8000")
    health = client.get("/health")
    assert health.status_code == 200 and health.json() == {"status": "alive"}
    assert health["Cache-Control"] == "no-store"
    ready = client.get("/ready")
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}
    # Anything else from that host is still refused by the host check.
    assert client.get("/admin/login/").status_code == 400


def test_ready_is_503_while_the_database_does_not_answer():
    saved = dict(connection.settings_dict)
    connection.close()
    # A port nothing listens on: the database is really unreachable, not pretended.
    connection.settings_dict.update(
        HOST="127.0.0.1", PORT="9", OPTIONS={**saved.get("OPTIONS", {}), "connect_timeout": 2}
    )
    try:
        answer = Client().get("/ready")
        assert answer.status_code == 503
        assert answer.json() == {"status": "unavailable", "database": "unreachable"}
        assert Client().get("/health").status_code == 200
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
    assert Client().get("/ready").status_code == 200


def test_only_reads_are_answered():
    assert Client().post("/health").status_code != 200
