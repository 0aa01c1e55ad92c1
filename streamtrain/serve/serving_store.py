"""What ``streamtrain serve`` reads the trainers' model from: their Redis store (retrying only
as long as a request may wait) and, for a graph model, their Redis graph store."""
from __future__ import annotations

from streamtrain.errors import ConfigError
from streamtrain.graphstore.stream import open_graph_input


def serving_store_config(config: dict, settings: dict) -> dict:
    """The job's store section, retrying for ``store_give_up_s`` only (a request is waiting)."""
    cfg = dict(config["store"])
    if cfg.get("backend", "memory") != "redis" or not (cfg.get("urls") or cfg.get("cluster")):
        raise ConfigError([("store", "streamtrain serve reads the parameters the trainers write: "
                                     "it needs store.backend=redis with store.urls or store.cluster "
                                     "(a memory store is served by `streamtrain run` with serve.enabled=true)")])
    cfg.setdefault("namespace", config.get("name") or "default")
    give_up = float(settings["store_give_up_s"])
    cfg["retry"] = {"initial_s": 0.05, "max_s": max(0.05, give_up / 4), "give_up_s": give_up}
    cfg["timeout_s"] = min(float(cfg.get("timeout_s", 5.0)), give_up / 2)     # two attempts at least
    cfg["mode"] = "async"                 # a server never joins the trainers' barrier
    cfg["write_back_s"] = 0               # it reads what the trainers flushed (its own cache is serve/cache.py)
    return cfg


def serving_graph_input(config: dict, settings: dict):
    """A graph model's graph input on the Redis graph store the trainers write (None without a
    ``graph`` section); its requests fail within ``store_give_up_s`` like the parameters'."""
    cfg = config.get("graph")
    if cfg is None:
        return None
    store = dict(cfg.get("store") or {})
    if store.get("backend", "memory") != "redis":
        raise ConfigError([("graph.store", "streamtrain serve samples the graph the trainers write: it needs "
                                           "graph.store.backend=redis (a memory graph is served by "
                                           "`streamtrain run` with serve.enabled=true, or from a checkpoint "
                                           "with --restore)")])
    store["timeout_s"] = min(float(store.get("timeout_s", 5.0)), float(settings["store_give_up_s"]))
    return open_graph_input({**cfg, "store": store}, namespace=config.get("name") or "default")
