"""streamtrain: a streaming online-learning daemon.

Importing it changes nothing outside the package: the process-wide settings (BLAS threads,
numba's start-up, kafka-python's socket reads) are applied by the command line's start
(``streamtrain.startup``).
"""
__version__ = "0.1.0"


def limit_blas_threads() -> None:
    """``streamtrain.startup.limit_blas_threads``: the BLAS thread limit on the BLAS already loaded."""
    from .startup import limit_blas_threads as limit
    limit()
