"""Serve a repository with the embedded tritonserver and answer one request per model whose name starts
with PREFIX: prints each model's platform/backend, its answer's shape, and the cosine of every model's
answer against the first one's (the fp32 version first in name order), on the same seeded input.

Usage: python3 scripts/gpu/serve_once.py REPO PREFIX
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT)]

import tritonclient.http as httpclient  # noqa: E402

from tritonkit.serve.embedded import EmbeddedServer  # noqa: E402

DTYPES = {"TYPE_FP32": np.float32, "TYPE_FP16": np.float16, "TYPE_INT64": np.int64, "TYPE_INT32": np.int32}


def main() -> int:
    repo, prefix = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(0)
    first: np.ndarray | None = None
    with EmbeddedServer(repo) as server:
        client = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        names = sorted(p.name for p in Path(repo).iterdir() if p.name.startswith(prefix) and p.is_dir())
        for name in names:
            cfg = client.get_model_config(name)
            inputs = []
            for spec in cfg["input"]:
                dims = [1, *(int(d) for d in spec["dims"])]
                dtype = DTYPES[spec["data_type"]]
                data = (
                    rng.standard_normal(dims).astype(dtype)
                    if dtype in (np.float32, np.float16)
                    else np.ones(dims, dtype)
                )
                tensor = httpclient.InferInput(spec["name"], dims, spec["data_type"].removeprefix("TYPE_"))
                tensor.set_data_from_numpy(data)
                inputs.append(tensor)
            rng = np.random.default_rng(0)  # every model the same input
            out = client.infer(name, inputs).as_numpy(cfg["output"][0]["name"])
            assert out is not None
            flat = out.astype(np.float64).ravel()
            if first is None:
                first = flat
            cosine = float(flat @ first / (np.linalg.norm(flat) * np.linalg.norm(first) + 1e-30))
            print(
                f"{name}: {cfg.get('backend') or cfg.get('platform')} answer {out.shape} {out.dtype}, cosine vs {names[0]} {cosine:.6f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
