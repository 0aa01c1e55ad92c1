"""streamtrain: a streaming online-learning daemon."""
__version__ = "0.1.0"
