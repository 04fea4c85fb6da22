"""A refit's arithmetic does not depend on the caller's BLAS pools (``engine.REFIT_BLAS_THREADS``):
the same events and configuration give the same snapshot on any number of cores."""

from __future__ import annotations

import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_info, threadpool_limits

from streammom import StreamingHierarchy
from streammom.datasets import make_hierarchical_bernoulli
from streammom.refit import RefitPass


def _blas_threads() -> list[int]:
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def _snapshot_after_stream(X: sp.csr_array, blas_threads: int) -> bytes:
    """The acceptance protocol's pass (defaults, batches of 1,000) with the caller's BLAS pools
    at ``blas_threads``; the engine's snapshot at the end."""
    with threadpool_limits(limits=blas_threads, user_api="blas"):
        eng = StreamingHierarchy(X.shape[1], max_leaves=8)
        for start in range(0, X.shape[0], 1_000):
            eng.partial_fit(X[start:start + 1_000])
        return eng.snapshot()


@pytest.fixture(scope="module")
def stream() -> sp.csr_array:
    X, _, _ = make_hierarchical_bernoulli(6_000, 500, 8, random_state=0)
    return sp.csr_array(X)


def test_a_refit_runs_on_one_blas_thread_and_gives_the_callers_pools_back(
        monkeypatch: pytest.MonkeyPatch, stream: sp.csr_array) -> None:
    """Inside every refit the BLAS pools hold one thread; after it, the caller's limit is back."""
    seen: list[list[int]] = []
    real_run = RefitPass.run

    def spying_run(self: RefitPass) -> list[dict]:
        seen.append(_blas_threads())
        return real_run(self)

    monkeypatch.setattr(RefitPass, "run", spying_run)
    with threadpool_limits(limits=2, user_api="blas"):
        callers = _blas_threads()
        eng = StreamingHierarchy(stream.shape[1], max_leaves=8)
        eng.partial_fit(stream[:2_000])
        assert eng.n_refits_ >= 1
        assert _blas_threads() == callers
    assert seen and all(threads and set(threads) == {1} for threads in seen), seen


def test_the_same_events_give_the_same_snapshot_on_one_or_two_blas_threads(
        stream: sp.csr_array) -> None:
    """The caller's pools at one thread or at two: byte-identical snapshots. With the refit on
    the caller's pools (``REFIT_BLAS_THREADS = None``) these 6,000 events gave two different
    snapshots on a 2-core machine's OpenBLAS (measured when the pin was added)."""
    assert _snapshot_after_stream(stream, 1) == _snapshot_after_stream(stream, 2)
