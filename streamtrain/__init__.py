"""streamtrain: a streaming online-learning daemon.

One trainer process per core is the deployment model, so BLAS runs single-threaded unless
``STREAMTRAIN_BLAS_THREADS`` says otherwise: small per-batch matrix products lose to thread
hand-offs, badly so on a busy machine.
"""
import os as _os

_threads = _os.environ.get("STREAMTRAIN_BLAS_THREADS", "1")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ.setdefault(_var, _threads)


def limit_blas_threads() -> None:
    """Apply the BLAS thread limit even when numpy was imported (and its pool started) before us."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:   # pragma: no cover - threadpoolctl is a dependency
        return
    threadpool_limits(limits=int(_threads), user_api="blas")


__version__ = "0.1.0"
