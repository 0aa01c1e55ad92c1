"""streamtrain: a streaming online-learning daemon.

One trainer process per core is the deployment model, so BLAS runs single-threaded unless
the environment says otherwise (small per-batch matrix products lose to thread hand-offs).
"""
import os as _os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ.setdefault(_var, "1")

__version__ = "0.1.0"
