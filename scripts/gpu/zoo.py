"""The zoo, run: every architecture of tests/support/torch_zoo.py (torchvision's own models where
torchvision imports), of tests/support/torch_zoo_more.py (transformers models passed as they are, RNN
classifiers) and the `onnx` package's test CNNs, each built fp32 + fp16 + int8 with no edit to the
model, and a markdown table of what came out.

    python scripts/gpu/zoo.py --out zoo.md --raw zoo.json             # full size (the GPU host)
    python scripts/gpu/zoo.py --small --out zoo.md --raw zoo.json     # test sizes (any CPU machine)
    --only vit,bert,onnx      entries to build (families, `onnx` for every test CNN, or one CNN's name)
    --merge FILE              keep the entries not built now from an earlier run's JSON
    --render-from A.json ...  write the page from earlier runs' JSON only

Random weights (seeded); data is seeded noise (images) and random token ids (text, half the samples
padded). Gates use cosine on the first output; int8 marks mean 0.95 / min 0.8 (random weights make
no task metric). Versions are planned for the CPU (`serving.device: cpu`): this is about conversion.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT)]

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import yaml  # noqa: E402
from tests.support import torch_zoo, torch_zoo_more  # noqa: E402

from tritonkit import cli, machine  # noqa: E402
from tritonkit.convert import isolate  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
CNNS = sorted(p.stem for p in LIGHT.glob("light_*.onnx"))
PRECISIONS = ("fp32", "fp16", "int8")


def _text(count: int, vocab: int, seq: int, mask: bool, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab, (count, seq), dtype=np.int64)
    if not mask:
        return {"input_ids": ids}
    attention = np.ones_like(ids)
    attention[: count // 2, seq * 3 // 4 :] = 0
    return {"input_ids": ids, "attention_mask": attention}


def _family_inputs(name: str, small: bool, count: int, seed: int) -> dict[str, np.ndarray]:
    family = torch_zoo.FAMILIES[name]
    if family.kind == "image":
        size = family.image[0] if small else family.image[1]
        return {"x": np.random.default_rng(seed).standard_normal((count, 3, size, size)).astype(np.float32)}
    vocab = family.vocab[0] if small else family.vocab[1]
    return _text(count, vocab, 16 if small else 128, family.mask, seed)


def _cnn_input(model: str) -> str:
    graph = onnx.load(str(LIGHT / f"{model}.onnx"), load_external_data=False).graph
    weights = {i.name for i in graph.initializer}
    return next(v.name for v in graph.input if v.name not in weights)


def _spec(name: str, source: dict[str, Any], samples: int, folder: Path) -> dict[str, Any]:
    return {
        "name": name,
        "source": source,
        "precisions": list(PRECISIONS),
        "calibration": {
            "data": str(folder / "cal.npz"),
            "samples": samples,
            "min_samples": 4,
            "batch_size": 8,
        },
        "evaluation": {"data": str(folder / "eval.npz"), "samples": samples // 2, "batch_size": 8},
        "accuracy": {"metric": "cosine", "int8": {"mean": 0.95, "min": 0.8}},
        "batching": {"max_batch_size": None},
        "serving": {"device": "cpu"},
    }


def _build(name: str, spec: dict[str, Any], folder: Path) -> tuple[int, str, float]:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    err = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["build", str(path), "--repo", str(folder / "repo"), "--force"])
    return code, err.getvalue().strip(), time.perf_counter() - started


def _read(folder: Path, name: str) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for precision in PRECISIONS:
        record = json.loads((folder / "repo" / f"{name}_{precision}" / "1" / "build.json").read_text())
        extra, accuracy = record["extra"], record.get("accuracy") or {}
        if precision == "fp32":
            export = extra["sanitize"].get("export", {})
            row.update(
                exporter=export.get("exporter", "onnx file"),
                opset=extra["opset"],
                nodes=extra["sanitize"]["nodes_after"],
                sanitize={k: v for k, v in extra["sanitize"].items() if k not in ("export",)},
            )
            continue
        row[precision] = {k: accuracy.get(k) for k in ("mean", "min", "samples", "warning")}
    return row


def build_entry(entry: str, small: bool, samples: int, work: Path) -> dict[str, Any]:
    folder = work / entry
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    if entry in torch_zoo.FAMILIES:
        for file, seed, count in (("cal.npz", 1, samples), ("eval.npz", 2, samples // 2)):
            np.savez(folder / file, **_family_inputs(entry, small, count, seed))
        prefix = "" if small else "full_"
        source: dict[str, Any] = {"torch": f"tests.support.torch_zoo:{prefix}{entry}"}
        origin = (
            "torchvision"
            if not small and entry in torch_zoo.TORCHVISION and torch_zoo.torchvision_missing() is None
            else ("transformers" if entry in ("bert", "distilbert") else "tests/support/torch_zoo.py")
        )
    elif entry in torch_zoo_more.FAMILIES:
        built = torch_zoo_more.source(entry, full=not small)
        for file, seed, count in (("cal.npz", 1, samples), ("eval.npz", 2, samples // 2)):
            np.savez(folder / file, **torch_zoo_more.arrays(built, count, seed))
        source = {"torch": f"tests.support.torch_zoo_more:{'' if small else 'full_'}{entry}"}
        origin = torch_zoo_more.FAMILIES[entry][1]
    else:
        rng = np.random.default_rng(0)
        name = _cnn_input(entry)
        np.savez(folder / "cal.npz", **{name: rng.standard_normal((samples, 3, 224, 224)).astype(np.float32)})
        np.savez(
            folder / "eval.npz", **{name: rng.standard_normal((samples // 2, 3, 224, 224)).astype(np.float32)}
        )
        source = {"onnx": str(LIGHT / f"{entry}.onnx"), "dynamic_batch": True}
        origin = "onnx package test data"
    spec = _spec(entry, source, samples, folder)
    code, err, seconds = _build(entry, spec, folder)
    batch = "dynamic"
    if code and "cannot take a dynamic batch" in err:  # served unbatched, as given
        spec["source"]["dynamic_batch"] = False
        code, err, more = _build(entry, spec, folder)
        seconds += more
        batch = "fixed"
    row: dict[str, Any] = {"entry": entry, "origin": origin, "seconds": round(seconds, 1), "batch": batch}
    if code:
        row["error"] = err.splitlines()[-1] if err else f"exit {code}"
        return row
    row.update(_read(folder, entry))
    return row


def _cell(result: dict[str, Any] | None) -> str:
    if not result or result.get("mean") is None:
        return "-"
    text = f"{result['mean']:.4f} / {result['min']:.4f}"
    return text + " (trivial)" if result.get("warning") else text


def render(rows: list[dict[str, Any]], where: str, small: bool) -> str:
    size = "test sizes (tests/support/torch_zoo.py small configs)" if small else "full size"
    lines = [
        "# The zoo",
        "",
        f"Every model built fp32 + fp16 + int8 with `tritonkit build`, unedited, at {size}, on {where}.",
        "Random weights; cosine of fp16/int8 against fp32 on held-out noise (mean / min); `(trivial)`:",
        "the fp32 reference answers every sample alike (constant weights), so the gate proves nothing.",
        "Produced by `scripts/gpu/zoo.py`.",
        "",
        "| model | from | exporter | opset | batch | fp16 cosine | int8 cosine | build s | result |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        result = "built" if "error" not in row else f"refused: {row['error'][:160]}"
        lines.append(
            f"| {row['entry']} | {row['origin']} | {row.get('exporter', '-')} | {row.get('opset', '-')} | "
            f"{row['batch']} | {_cell(row.get('fp16'))} | {_cell(row.get('int8'))} | {row['seconds']} | {result} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="markdown page to write")
    parser.add_argument("--raw", type=Path, help="JSON of every row")
    parser.add_argument("--small", action="store_true", help="test sizes (CPU) instead of full size")
    parser.add_argument("--only", help="comma-separated entries (families, `onnx`, or light_* names)")
    parser.add_argument("--samples", type=int, default=16, help="calibration samples (evaluation: half)")
    parser.add_argument("--merge", type=Path, help="earlier run's JSON: keep its rows not built now")
    parser.add_argument("--render-from", type=Path, nargs="+", help="only render these runs' JSON")
    args = parser.parse_args()
    if args.render_from:
        runs = [json.loads(p.read_text()) for p in args.render_from]
        rows = [row for run in runs for row in run["rows"]]
        page = render(rows, runs[0]["machine"], runs[0]["small"])
    else:
        entries = [*torch_zoo.FAMILIES, *torch_zoo_more.FAMILIES, *CNNS]
        if args.only:
            wanted = [e.strip() for e in args.only.split(",") if e.strip()]
            entries = [e for e in entries if e in wanted or ("onnx" in wanted and e in CNNS)]
        work = Path(tempfile.mkdtemp(prefix="tritonkit-zoo-"))
        rows = []
        with isolate.session("zoo"):
            for entry in entries:
                rows.append(build_entry(entry, args.small, args.samples, work))
                print(json.dumps(rows[-1]), flush=True)
        shutil.rmtree(work, ignore_errors=True)
        if args.merge and args.merge.is_file():
            built = {r["entry"] for r in rows}
            rows += [r for r in json.loads(args.merge.read_text())["rows"] if r["entry"] not in built]
        order = {e: i for i, e in enumerate([*torch_zoo.FAMILIES, *torch_zoo_more.FAMILIES, *CNNS])}
        rows.sort(key=lambda r: order.get(r["entry"], len(order)))
        where = machine.description()
        page = render(rows, where, args.small)
        if args.raw:
            args.raw.write_text(json.dumps({"machine": where, "small": args.small, "rows": rows}, indent=1))
    if args.out:
        args.out.write_text(page, encoding="utf-8")
    else:
        print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
