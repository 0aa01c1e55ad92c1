"""Champion/challenger AutoML on the stream (issue 28): ``space`` (the ``automl`` section's
search space), ``bounds`` (the confidence sequence), ``search`` (promotions, retirements,
proposals), ``candidates`` (a model per configuration, in its own namespace of the store),
``trainer`` (every candidate on one parsed batch) and ``attach`` (the daemon's side)."""
