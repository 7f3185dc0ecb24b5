"""How many threads a job's numerics may use, from its method's ``Resources.cpus``.

Small models are slower when torch or BLAS split each product over threads on a busy machine,
and on two cores a second thread is the GUI's. The worker runs every job inside
``limit_threads(cpus)``; methods need not manage threads themselves.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def limit_threads(threads: int) -> Iterator[None]:
    """torch's intra-op threads and every BLAS/OpenMP pool at ``threads``, restored after."""
    from threadpoolctl import threadpool_limits

    threads = max(1, int(threads))
    torch = sys.modules.get("torch")
    previous = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(threads)
    try:
        with threadpool_limits(limits=threads):
            yield
    finally:
        if torch is not None and previous is not None:
            torch.set_num_threads(previous)
