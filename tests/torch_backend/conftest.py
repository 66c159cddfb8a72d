"""Where braze runs from a checkout that is not installed (the system Python of a GPU machine, with
PYTHONPATH set), torch finds no `torch_dynamo_backends` entry point: the backend is registered by
the same name, as installing braze does. Installed (CI, `make test`), the entry point is used.
Every test starts and ends with Dynamo's caches empty."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def braze_backend_by_name():
    torch = pytest.importorskip("torch")
    from torch._dynamo import list_backends, register_backend

    if "braze" not in list_backends(exclude_tags=()):
        from braze.frontend.torch import backend

        register_backend(name="braze")(backend)
    return torch


@pytest.fixture(autouse=True)
def fresh_dynamo(braze_backend_by_name):
    torch = braze_backend_by_name
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
