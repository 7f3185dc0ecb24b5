"""Methods called directly in tests get the thread limit their worker would give them."""

import pytest

from engine.threads import limit_threads


@pytest.fixture(autouse=True)
def one_thread_like_a_worker():
    with limit_threads(1):  # every built-in method declares Resources(cpus=1)
        yield
