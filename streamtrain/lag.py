"""A source's lag (Kafka's messages behind per partition), read without prometheus-client: the
progress line, the summary and ``/healthz`` ask for it as well as the lag gauges
(``metrics_scrape.LagCollector``)."""
from __future__ import annotations


def source_lag(source) -> dict | None:
    """The source's lag if it reports one (``source.lag()``, which must be thread-safe, or a
    ``lag`` mapping), else None."""
    lag = getattr(source, "lag", None)
    if callable(lag):
        try:
            lag = lag()
        except Exception:  # a broker hiccup must not break training; the next refresh retries
            return None
    return lag if isinstance(lag, dict) else None


def total_lag(source) -> int | None:
    lag = source_lag(source)
    return None if lag is None else int(sum(v for v in lag.values() if v is not None))
