import torch
from threadpoolctl import threadpool_info

from engine.threads import limit_threads


def test_limit_threads_sets_torch_and_blas_and_restores():
    torch.set_num_threads(2)
    with limit_threads(1):
        assert torch.get_num_threads() == 1
        assert all(pool["num_threads"] == 1 for pool in threadpool_info())
    assert torch.get_num_threads() == 2
