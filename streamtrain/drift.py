"""Drift alarms over the progressive loss: Page-Hinkley and ADWIN, fed a whole batch at a time.

The trainer predicts every example before learning from it; the loss of that prediction (the
progressive loss) rises when the stream changes under the model. A detector is fed the
per-example losses of each batch in order and returns where, in the batch, it raised an alarm.
After an alarm a detector starts afresh (River's convention).

* ``page_hinkley`` — the Page-Hinkley test of River's ``drift.PageHinkley``:
  ``S_t = alpha S_{t-1} + (x_t - mean_t) - delta``, alarm when ``S_t - min S > threshold``
  (mode ``up``; ``down`` watches ``max T - T_t`` with ``T_t = alpha T_{t-1} + x_t - mean_t + delta``).
  Per value by nature, compiled (one pass over the batch, River's arithmetic).
* ``adwin`` — ADWIN, per value by nature, compiled (``streamtrain.adwin``).

The defaults are set for per-example logloss (standard deviation around 0.5-1) and ignore
changes of the mean loss below 0.02 (Page-Hinkley's ``delta``, ADWIN's ``min_change``): a
window of millions of examples otherwise finds the learner's own wander (a thousandth of a
loss) significant. With them a stationary stream raises no alarm in 20M examples, a learner
whose log-odds wander by 0.1 none in 200M (0.005 and no ``min_change``: 3 and 1 in 100M), and a
change of the mean loss by 0.35 is caught within 2,000 examples (``tests/test_drift.py``).
The log says so at most once per detector per ``log_every_seconds``; metrics count every alarm.
The loss is the model's own: logloss, ``softmax_ce``'s ``-log p[y]``, ``mse``'s squared error
over the labels' variance so far (``progressive.Regression``: the label's units drop out).

>>> ph = PageHinkley(min_instances=1, delta=0.0, threshold=2.5)
>>> ph.update_many(np.array([0.0, 0.0, 0.0, 4.0])).tolist()
[3]
"""
from __future__ import annotations

import logging
import time

import numpy as np

from . import adwin as kernel
from .compiled import njit
from .registry import Registry
from .schema import Option, check_options, join, kind_problems, non_negative, positive, with_defaults

log = logging.getLogger("streamtrain.drift")
DETECTORS = Registry("drift detector", group="streamtrain.drift")
register = DETECTORS.register


def _unit_interval(v):
    return None if 0 < v <= 1 else f"must be in (0, 1], got {v!r}"


class Detector:
    kind = ""
    options: dict = {}

    def __init__(self, **opts):
        problems = check_options(self.options, opts, what=f"drift detector '{self.kind}'")
        if problems:
            from .errors import ConfigError
            raise ConfigError(problems)
        self.opts = with_defaults(self.options, opts)
        self.seen = 0                  # values fed since the last alarm (or the start)
        self.reset()

    def reset(self) -> None:
        raise NotImplementedError

    def update_many(self, x) -> np.ndarray:
        """Feed ``x`` in order; the positions in ``x`` of the values that raised an alarm."""
        raise NotImplementedError

    @classmethod
    def test_params(cls) -> dict:
        return {}


@register
class PageHinkley(Detector):
    kind = "page_hinkley"
    options = {
        "min_instances": Option(1000, (int,), check=positive, doc="values before an alarm may fire"),
        "delta": Option(0.02, (int, float), check=non_negative, doc="tolerated change of the mean"),
        "threshold": Option(300.0, (int, float), check=positive, doc="lambda: the alarm level"),
        "alpha": Option(1.0, (int, float), check=_unit_interval, doc="fading factor of the sum (1: none)"),
        "mode": Option("up", (str,), choices=("up", "down", "both"), doc="which change to watch"),
    }

    def reset(self) -> None:
        self.state = np.array([0.0, 0.0, 0.0, np.inf, 0.0, -1.0])    # n, mean, s_inc, min_inc, s_dec, max_dec

    def update_many(self, x) -> np.ndarray:
        o = self.opts
        return _page_hinkley(np.ascontiguousarray(x, np.float64).reshape(-1), self.state, float(o["min_instances"]),
                             float(o["delta"]), float(o["threshold"]), float(o["alpha"]),
                             o["mode"] in ("up", "both"), o["mode"] in ("down", "both"))

    @classmethod
    def test_params(cls) -> dict:
        return {"min_instances": 30, "threshold": 50.0}


@njit(nogil=True)
def _page_hinkley(x, state, min_instances, delta, threshold, alpha, up, down):
    """River's ``PageHinkley.update`` over ``x`` in order (``state`` updated in place); the
    positions of the alarms, after each of which the test starts afresh."""
    n, mean, s_inc, min_inc, s_dec, max_dec = state[0], state[1], state[2], state[3], state[4], state[5]
    alarms = np.empty(len(x), np.int64)
    k = 0
    for i in range(len(x)):
        n += 1.0
        mean += (x[i] - mean) / n
        dev = x[i] - mean
        s_inc = alpha * s_inc + dev - delta
        s_dec = alpha * s_dec + dev + delta
        min_inc = min(min_inc, s_inc)
        max_dec = max(max_dec, s_dec)
        if n >= min_instances and ((up and s_inc - min_inc > threshold) or (down and max_dec - s_dec > threshold)):
            alarms[k] = i
            k += 1
            n, mean, s_inc, min_inc, s_dec, max_dec = 0.0, 0.0, 0.0, np.inf, 0.0, -1.0
    state[0], state[1], state[2], state[3], state[4], state[5] = n, mean, s_inc, min_inc, s_dec, max_dec
    return alarms[:k]


DIRECTIONS = {"up": 1, "down": -1, "both": 0}     # ADWIN's mode: the loss rose, fell, either


@register
class Adwin(Detector):
    kind = "adwin"
    options = {
        "delta": Option(1e-5, (int, float), check=positive, doc="confidence of a cut"),
        "clock": Option(32, (int,), check=positive, doc="check the window every this many values"),
        "max_buckets": Option(5, (int,), check=positive, doc="buckets per row of the histogram"),
        "min_window_length": Option(5, (int,), check=positive, doc="values each side of a cut"),
        "grace_period": Option(1000, (int,), check=non_negative, doc="values before a check"),
        "mode": Option("up", (str,), choices=tuple(DIRECTIONS),
                       doc="which change raises the alarm (every change still shrinks the window)"),
        "min_change": Option(0.02, (int, float), check=non_negative,
                             doc="the least change of the mean that raises the alarm"),
    }

    def reset(self) -> None:
        self.state = kernel.new_state(self.opts["max_buckets"])

    @property
    def width(self) -> int:
        return int(self.state[0][kernel.WIDTH])

    @property
    def estimation(self) -> float:
        sc = self.state[0]
        return float(sc[kernel.TOTAL] / sc[kernel.WIDTH]) if sc[kernel.WIDTH] else 0.0

    def update_many(self, x) -> np.ndarray:
        o = self.opts
        return kernel.run(np.ascontiguousarray(x, np.float64).reshape(-1), *self.state, float(o["delta"]),
                          o["clock"], o["max_buckets"], float(o["min_window_length"]), float(o["grace_period"]),
                          DIRECTIONS[o["mode"]], float(o["min_change"]))

    @classmethod
    def test_params(cls) -> dict:
        return {"delta": 0.002, "grace_period": 10}


# ---- in the trainer ----------------------------------------------------------------------
def _detector_problems(value) -> list[tuple[str, str]]:
    """Each listed detector: a known ``type`` and that kind's options."""
    found = []
    for i, d in enumerate(value or []):
        if not isinstance(d, dict):
            found.append((f"[{i}]", f'expected an object like {{"type": "adwin"}}, got {d!r}'))
            continue
        found += [(join(f"[{i}]", k), m) for k, m in kind_problems(DETECTORS, d)]
    return found


DRIFT_OPTIONS = {
    "enabled": Option(True, (bool,), doc="run the detectors over the progressive loss"),
    "detectors": Option(None, (list, type(None)), nested=_detector_problems,
                        doc='`[{"type": "page_hinkley" or "adwin", options…}]`; null = both, with their defaults'),
    "log_every_seconds": Option(300.0, (int, float), check=non_negative,
                                doc="at most one alarm line per detector this often (the others are "
                                    "counted in the next line and in the metrics; 0 = every alarm)"),
}
CHANGE = {"up": "rose", "down": "fell", "both": "changed"}


class DriftMonitor:
    """A job hook: feeds each applied batch's progressive losses to every detector.

    ``alarms[kind]`` counts the alarms, ``last_alarm[kind]`` is the Unix time of the last one,
    ``last_example[kind]`` the stream position (examples trained before it) where it fired.
    """

    def __init__(self, detectors: list[Detector], log_every_s: float = 300.0, clock=time.monotonic):
        self.detectors = detectors
        self.alarms = {d.kind: 0 for d in detectors}
        self.last_alarm: dict[str, float] = {}
        self.last_example: dict[str, int] = {}
        self.examples = 0
        self.log_every_s, self.clock = float(log_every_s), clock
        self._unlogged = {d.kind: 0 for d in detectors}     # alarms since the detector's last line
        self._next_line: dict[str, float] = {}

    @classmethod
    def from_config(cls, cfg: dict | None) -> "DriftMonitor | None":
        cfg = cfg or {}
        if not cfg.get("enabled", True):
            return None
        specs = cfg.get("detectors")
        if specs is None:
            specs = [{"type": "page_hinkley"}, {"type": "adwin"}]
        return cls([DETECTORS.get(s["type"])(**{k: v for k, v in s.items() if k != "type"}) for s in specs],
                   log_every_s=cfg.get("log_every_seconds", 300.0))

    def _say(self, d: Detector, n: int) -> None:
        """One WARNING line per detector per ``log_every_s`` at most, with the alarms since the last."""
        self._unlogged[d.kind] += n
        now = self.clock()
        if now < self._next_line.get(d.kind, now):
            return
        more, self._unlogged[d.kind] = self._unlogged[d.kind] - 1, 0
        self._next_line[d.kind] = now + self.log_every_s
        log.warning("drift alarm (%s) at example %d: the progressive loss %s%s", d.kind, self.last_example[d.kind],
                    CHANGE.get(d.opts.get("mode"), "changed"),
                    f" ({more} more alarm(s) of it since its last line, {self.log_every_s:.0f} s ago at most)"
                    if more else "")

    def update(self, losses) -> dict[str, np.ndarray]:
        losses = np.asarray(losses, np.float64)
        losses = losses[np.isfinite(losses)]
        out = {}
        for d in self.detectors:
            hits = d.update_many(losses)
            out[d.kind] = hits
            if len(hits):
                self.alarms[d.kind] += len(hits)
                self.last_alarm[d.kind] = time.time()
                self.last_example[d.kind] = self.examples + int(hits[-1])
                self._say(d, len(hits))
        self.examples += len(losses)
        return out

    def on_step(self, job, batch, result) -> None:
        if result.applied and result.losses is not None:
            self.update(result.losses)        # the progressive figures' per-example losses, any loss kind
