"""pytest fixtures around the test Node-API server and the official client pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .server import NodeAPIServer


@pytest.fixture
def k8sapi() -> Iterator[NodeAPIServer]:
    """A fresh test Node-API server on a free loopback port, stopped after the test."""
    srv = NodeAPIServer().start()
    try:
        yield srv
    finally:
        srv.stop()


def core_api(url: str, timeout: float = 5.0) -> Any:
    """A ``kubernetes.client.CoreV1Api`` of the official client, pointed at ``url``."""
    from kubernetes import client

    conf = client.Configuration()
    conf.host = url
    conf.retries = False
    api = client.CoreV1Api(client.ApiClient(conf))
    return api
