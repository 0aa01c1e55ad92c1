"""PyTorch DeepFM and DCN: what a deep-CTR user would pick instead of streamtrain, same features.

    python bench/torch_peers.py --model deepfm --data FILE.tsv [--batch-size 256] [--threads 2]

Run as its own process by ``bench/targets.py`` (whole-process time measured outside). The
features are streamtrain's, from streamtrain's own Criteo parser: 26 categorical fields hashed
to 64-bit ids (one table shared by all fields, ids taken modulo ``--table-rows``; a missing
value is a zero padding row) and 13 numeric fields as sign(x)·log1p|x|. The models mirror
``examples/deepfm.json`` / ``examples/dcn.json``: a wide (dim-1) embedding + a linear term on
the numeric fields + a bias, an 8-dim embedding, then FM + MLP 64-32-1 (DeepFM) or a 3-layer
cross network beside an MLP 64-32 joined by a linear output (DCN v1). Optimisers as in the
example files where torch has them: Adagrad (sparse gradients) for the embeddings (lr 0.03) and
the wide / linear / bias terms (lr 0.05: torch has no FTRL), Adam for the MLP and cross at the
example file's rate (``mlp_rate``: deepfm 0.004, dcn 0.001).
Predict-then-learn per mini-batch, one pass. Prints one JSON line: examples, seconds in the
training loop (forward, backward, step; reading and tensor building excluded), seconds from
the first line of ``main`` to the end, and the progressive logloss.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

DIM, FIELDS, DENSE = 8, 26, 13


class Features(nn.Module):
    """Shared hashed embedding (dim 8) + wide embedding (dim 1) + linear(dense) + bias."""

    def __init__(self, rows: int):
        super().__init__()
        self.emb = nn.Embedding(rows + 1, DIM, padding_idx=rows, sparse=True)
        nn.init.normal_(self.emb.weight, std=0.01)
        self.wide = nn.Embedding(rows + 1, 1, padding_idx=rows, sparse=True)
        nn.init.zeros_(self.wide.weight)
        self.linear = nn.Linear(DENSE, 1)            # its bias is the model's bias
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, idx, dense):
        e = self.emb(idx)                                            # [B, F, d]
        first = self.wide(idx).sum(dim=(1, 2)) + self.linear(dense).squeeze(1)
        return e, first

    def dense_parameters(self):
        return list(self.linear.parameters())


def mlp(n_in: int, dims=(64, 32)) -> nn.Sequential:
    layers = []
    for d in dims:
        layers += [nn.Linear(n_in, d), nn.ReLU()]
        n_in = d
    return nn.Sequential(*layers)


class DeepFM(nn.Module):
    def __init__(self, rows: int):
        super().__init__()
        self.features = Features(rows)
        self.deep = nn.Sequential(mlp(FIELDS * DIM + DENSE), nn.Linear(32, 1))

    def forward(self, idx, dense):
        e, first = self.features(idx, dense)
        s = e.sum(dim=1)
        fm = 0.5 * (s * s - (e * e).sum(dim=1)).sum(dim=1)
        deep = self.deep(torch.cat([e.flatten(1), dense], dim=1)).squeeze(1)
        return first + fm + deep


class DCN(nn.Module):
    def __init__(self, rows: int, cross_layers: int = 3):
        super().__init__()
        self.features = Features(rows)
        n = FIELDS * DIM + DENSE
        self.w = nn.Parameter(torch.randn(cross_layers, n) * 0.01)
        self.b = nn.Parameter(torch.zeros(cross_layers, n))
        self.deep = mlp(n)
        self.out = nn.Linear(n + 32, 1)

    def forward(self, idx, dense):
        e, first = self.features(idx, dense)
        x0 = torch.cat([e.flatten(1), dense], dim=1)
        xl = x0
        for l in range(self.w.shape[0]):
            xl = x0 * (xl @ self.w[l]).unsqueeze(1) + self.b[l] + xl
        joined = torch.cat([xl, self.deep(x0)], dim=1)
        return first + self.out(joined).squeeze(1)


MODELS = {"deepfm": DeepFM, "dcn": DCN}


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def mlp_rate(name: str) -> float:
    """The Adam rate of ``examples/<name>.json``'s MLP (every Adam layer there has the same)."""
    layers = json.loads((EXAMPLES / f"{name}.json").read_text())["layers"]
    rates = {layer["optimizer"]["lr"] for layer in layers if layer.get("optimizer", {}).get("type") == "adam"}
    if len(rates) != 1:
        raise SystemExit(f"examples/{name}.json: the PyTorch peer takes one Adam rate for its MLP; "
                         f"the example's Adam layers have {sorted(rates) or 'none'}")
    (rate,) = rates
    return rate


def optimizers(model, adam_lr: float) -> list:
    f = model.features
    first = [f.wide.weight]
    dense_first = f.dense_parameters()
    others = [p for n, p in model.named_parameters()
              if not n.startswith("features.")]
    return [torch.optim.Adagrad([f.emb.weight], lr=0.03),
            torch.optim.Adagrad(first, lr=0.05),
            torch.optim.Adagrad(dense_first, lr=0.05),
            torch.optim.Adam(others, lr=adam_lr)]


def tensors(batch, rows: int):
    """A parsed streamtrain batch → (ids [B, F] int64 with missing = padding row, dense, labels)."""
    from streamtrain.readers.criteo import SPARSE
    idx = np.full((batch.size, FIELDS), rows, np.int64)
    for j, name in enumerate(SPARSE):
        f = batch.sparse[name]
        present = f.offsets[1:] > f.offsets[:-1]
        idx[present, j] = (f.ids % np.uint64(rows)).astype(np.int64)
    return (torch.from_numpy(idx), torch.from_numpy(np.ascontiguousarray(batch.dense, np.float32)),
            torch.from_numpy(np.asarray(batch.labels, np.float32)))


def main(argv=None) -> int:
    t_start = time.perf_counter()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--data", required=True, help="Criteo TSV (plain or gzip)")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2,
                    help="torch.set_num_threads (streamtrain's: training and parse threads)")
    ap.add_argument("--table-rows", type=int, default=1 << 22)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message="Sparse invariant checks")
    torch.manual_seed(0)
    from streamtrain.readers import Malformed, open_reader

    model = MODELS[args.model](args.table_rows)
    opts = optimizers(model, mlp_rate(args.model))
    loss_fn = nn.BCEWithLogitsLoss(reduction="sum")
    src = open_reader({"type": "file", "path": args.data, "format": "criteo"}, args.batch_size, Malformed())
    n, total_loss, train_s = 0, 0.0, 0.0
    try:
        for batch in src.batches():
            idx, dense, y = tensors(batch, args.table_rows)
            t0 = time.perf_counter()
            logit = model(idx, dense)
            loss = loss_fn(logit, y)                   # predicted before the step: progressive
            for o in opts:
                o.zero_grad(set_to_none=True)
            loss.backward()
            for o in opts:
                o.step()
            train_s += time.perf_counter() - t0
            total_loss += float(loss.detach())
            n += len(y)
    finally:
        src.close()
    print(json.dumps({"model": args.model, "examples": n, "train_s": train_s,
                      "main_s": time.perf_counter() - t_start, "logloss": total_loss / max(n, 1),
                      "threads": args.threads, "batch_size": args.batch_size}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
