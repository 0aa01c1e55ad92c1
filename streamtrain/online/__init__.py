"""Per-example learning inside a mini-batch: which terms of the logit the engine owns
(``plan``), what layers declare about them (``terms``), the compiled loop (``kernels``), the
engine the trainer calls (``engine``) and the cache warmer (``warm``). Importing this package
imports neither numba nor the engine: ``terms`` is what layers and optimizers need."""
