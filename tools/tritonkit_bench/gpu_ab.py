"""The python-backend torch runner against the native backend, one device call (``python -m
tritonkit_bench.gpu_ab``; ``scripts/gpu/native_ab.sh`` runs it per part).

Builds one part of the GPU benchmark (default ``bert``: BERT-base, sequence 128, FP16, as
:mod:`tritonkit_bench.gpu_models` writes it), times its engine in-process (the peak; for native variants
also the traced ``model.ts`` methods the native backend replays), then serves the same version directory
once per variant, only its config changed between servers: the backend (the python runner or the native
one), the instances per GPU and their GPUs, the batching delay, whether a batch of one is preferred, more
config parameters and tritonserver flags. Each variant is measured at the same levels of requests of one
row in flight by the product's generator of record (perf_analyzer where installed, else tritonkit's, at
most 8 processes), Triton's statistics beside it (:func:`tritonkit_bench.gpu_measure.sweep`). Writes a
small markdown table (``--out``) and the figures as JSON (``--raw``) after every variant.

``--dry-run`` runs the whole path on the CPU with a tiny model (no GPU, seconds), so a typo cannot cost
a device call.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from tritonkit.backends.native import BACKEND, export_program
from tritonkit.config import load, save
from tritonkit.convert.spec.execution import ServingSpec, method_buckets, plan_execution
from tritonkit.convert.targets.torch_program import write_torch_version
from tritonkit_bench.gpu_measure import HTTP_MAX_IN_FLIGHT, PROTOCOLS, in_process, sweep
from tritonkit_bench.gpu_models import PARTS, TINY, Part, build_part, examples, tiny_inputs, tiny_module
from tritonkit_bench.gpu_models import runner as load_torch_runner
from tritonkit_bench.gpu_render import peak

__all__ = ["main", "parse_args", "parse_variants", "render"]

DEFAULT_VARIANTS = "python:4,native:2,native:4"
DRY = "ab_dry"
#: the runners a variant serves with: the python-backend torch runner, the C++ backend
RUNNERS = ("python", "native")


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


class Variant(NamedTuple):
    """One served variant of the A/B."""

    #: :data:`RUNNERS`: ``python`` the python-backend torch runner, ``native`` the C++ backend
    runner: str
    #: instances per GPU
    instances: int
    #: the instance group's GPUs
    gpus: tuple[int, ...]
    #: batching delay in microseconds; None: as built
    delay_us: int | None
    #: whether a batch of one is among the batcher's preferred sizes; None: as built
    lone: bool | None
    #: more config parameters (``%key=value/key=value`` after the rest), e.g. the native backend's
    #: ``copy_threads``
    params: tuple[tuple[str, str], ...] = ()
    #: tritonserver flags (``^flag=value/flag=value`` at the very end), e.g.
    #: ``grpc-infer-allocation-pool-size``
    server: tuple[tuple[str, str], ...] = ()


def parse_variants(text: str) -> list[Variant]:
    """``python:2,native:4,python:4:0+1,native:4@0`` -> (runner, instances, gpus, delay, ...) each; gpus
    (the instance group's GPUs, ``+`` between them; the instances are per GPU) default to GPU 0, the
    batching delay in microseconds (after ``@``) to the built config's; ``+1`` / ``-1`` after it puts a batch
    of one among the batcher's preferred sizes or takes it out (a lone request then leaves at once or
    waits the delay), else as built; ``%copy_threads=1/copy_split_bytes=4096`` after it sets config
    parameters and ``^grpc-infer-allocation-pool-size=1024`` at the very end tritonserver flags."""
    out = []
    for item in (p.strip() for p in text.split(",") if p.strip()):
        item_params, _, flags = item.partition("^")
        core, _, extra = item_params.partition("%")
        pairs = [kv.partition("=") for kv in extra.split("/")] if extra else []
        params = tuple((k, v) for k, _, v in pairs)
        flag_pairs = [kv.partition("=") for kv in flags.split("/")] if flags else []
        server = tuple((k, v) for k, _, v in flag_pairs)
        head, _, tail = core.partition("@")
        lone = {"+1": True, "-1": False}.get(tail[-2:]) if tail else None
        delay = tail[:-2] if lone is not None else tail
        fields = head.split(":")
        gpus = fields[2].split("+") if len(fields) == 3 else ["0"]
        ok = (
            len(fields) in (2, 3)
            and fields[0] in RUNNERS
            and fields[1].isdigit()
            and int(fields[1]) >= 1
            and all(g.isdigit() for g in gpus)
            and (delay == "" or delay.isdigit())
            and all(k.isidentifier() and eq and v for k, eq, v in pairs)
            and all(k.replace("-", "_").isidentifier() and eq and v for k, eq, v in flag_pairs)
        )
        if not ok:
            raise argparse.ArgumentTypeError(
                "expected variants like python:2,native:4,python:4:0+1,native:4@0,native:4@500+1,"
                "native:4%copy_threads=1,native:4^grpc-infer-allocation-pool-size=1024 "
                "(python|native:instances[:gpus][@delay_us][+1|-1][%key=value/...]"
                f"[^server-flag=value/...]); got {item!r}"
            )
        out.append(
            Variant(
                fields[0],
                int(fields[1]),
                tuple(int(g) for g in gpus),
                int(delay) if delay else None,
                lone,
                params,
                server,
            )
        )
    if not out:
        raise argparse.ArgumentTypeError(f"expected at least one variant; got {text!r}")
    return out


def _levels(text: str) -> list[int]:
    try:
        levels = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1; got {text!r}")
    return levels


def _protocols(text: str) -> list[str]:
    picked = [p.strip() for p in text.split(",") if p.strip()]
    if not picked or any(p not in PROTOCOLS for p in picked):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated front ends of {', '.join(PROTOCOLS)}; got {text!r}"
        )
    return picked


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tritonkit_bench.gpu_ab", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--part", choices=sorted(PARTS), default="bert")
    parser.add_argument("--variants", type=parse_variants, default=parse_variants(DEFAULT_VARIANTS),
                        help=f"python|native:instances[:gpus][@delay_us]..., in order (default {DEFAULT_VARIANTS})")  # fmt: skip
    parser.add_argument(
        "--levels", type=_levels, default=[1, 64, 256], help="requests in flight (default 1,64,256)"
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per level (default 3)")
    parser.add_argument(
        "--client-processes", type=int, default=8, help="load-generator processes (default 8)"
    )
    parser.add_argument(
        "--protocol",
        type=_protocols,
        default=["grpc"],
        help=f"front ends loaded, each variant through each in turn (comma-separated of {', '.join(PROTOCOLS)}; default grpc)",
    )
    parser.add_argument("--out", default="runner-ab.md")
    parser.add_argument("--raw", default=None, help="also write the figures as JSON here")
    parser.add_argument("--work", default="/tmp/tritonkit-runner-ab", help="folder for the version and logs")
    parser.add_argument("--dry-run", action="store_true", help="the whole path on the CPU with a tiny model")
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error(f"--seconds must be > 0; got {args.seconds}")
    return args


def _dry_part(repo: Path) -> str:
    """A tiny FP32 torch-runner version on the CPU under the dry-run part's name."""
    PARTS[DRY] = Part(
        DRY, "a linear layer (dry run)", TINY, 16, (1, 4, 16), (1, 4), 50.0, tiny_module, tiny_inputs
    )
    plan = plan_execution(ServingSpec(engine="torch"), max_batch_size=16, gpus=[])
    write_torch_version(
        repo, PARTS[DRY].model, tiny_module(), examples(DRY, 2), ["Y"], plan, max_batch_size=16
    )
    return DRY


def configure(repo: Path, model: str, variant: Variant) -> None:
    """Set the variant in the model's config: the backend, the instances per GPU, the GPUs, the batching delay and whether one row is a preferred batch size."""
    v = variant
    path = repo / model / "config.pbtxt"
    config = load(path)
    config.instance_groups[0].count = v.instances
    if list(config.instance_groups[0].gpus) or v.gpus != (0,):  # a CPU group (the dry run) names no GPU
        del config.instance_groups[0].gpus[:]
        config.instance_groups[0].gpus.extend(v.gpus)
    config.backend = BACKEND if v.runner == "native" else "python"
    if v.delay_us is not None and config.dynamic_batching is not None:
        config.dynamic_batching.max_queue_delay_microseconds = v.delay_us
    if v.lone is not None and config.dynamic_batching is not None:
        sizes = [b for b in config.dynamic_batching.preferred_batch_size if b > 1]
        config.dynamic_batching.preferred_batch_size = [1, *sizes] if v.lone else sizes
    config.parameters.update(stats_interval_s="5")
    config.parameters.update(dict(v.params))
    save(config, path)


def _label(variant: Variant) -> str:
    v = variant
    where = "" if v.gpus == (0,) else f" per GPU on GPUs {'+'.join(map(str, v.gpus))}"
    kind = "native backend" if v.runner == "native" else "python runner"
    delay = "" if v.delay_us is None else f", delay {v.delay_us} µs"
    alone = (
        "" if v.lone is None else ", a lone request " + ("leaves at once" if v.lone else "waits the delay")
    )
    params = "".join(f", {k}={value}" for k, value in v.params)
    flags = "".join(f", --{k}={value}" for k, value in v.server)
    return f"{kind}, {v.instances} instances{where}{delay}{alone}{params}{flags}"


def trace_native(repo: Path, model: str, device: str) -> None:
    """The version's ``model.ts`` traced on ``device`` (the embedded server compiles the backend)."""
    config = load(repo / model / "config.pbtxt")
    program = repo / model / "1" / "model.pt2"
    module, dtypes = load_torch_runner("torch_runner").load_program(str(program), device)
    export_program(program.parent, module, dtypes, config, method_buckets(config.max_batch_size), device)


def measure(args: argparse.Namespace, save_figures: Any) -> dict[str, Any]:
    work = Path(args.work)
    repo = work / "repo"
    work.mkdir(parents=True, exist_ok=True)
    part = _dry_part(repo) if args.dry_run else args.part
    if not args.dry_run:
        build_part(repo, part, log)
    device = "cpu" if args.dry_run else "cuda:0"
    data: dict[str, Any] = {"part": args.part if not args.dry_run else DRY, "model": PARTS[part].model,
                            "dry_run": args.dry_run, "levels": args.levels, "seconds": args.seconds,
                            "client_processes": args.client_processes, "protocol": args.protocol, "variants": []}  # fmt: skip
    data["in_process"] = in_process(repo, part, device=device)
    log(f"in-process {json.dumps({k: round(v) for k, v in data['in_process'].items()})}")
    save_figures(data)
    native = [v for v in args.variants if v.runner == "native"]
    if native:
        started = time.perf_counter()
        trace_native(repo, PARTS[part].model, device)
        log(f"model.ts exported in {time.perf_counter() - started:.1f} s")
        configure(repo, PARTS[part].model, native[0])  # the traced methods the native backend replays
        data["in_process_native"] = in_process(repo, part, device=device)
        log(
            f"in-process, native program {json.dumps({k: round(v) for k, v in data['in_process_native'].items()})}"
        )
        save_figures(data)
    for chosen in args.variants:
        label = _label(chosen)
        configure(repo, PARTS[part].model, chosen)
        log(f"serving: {label}")
        variant: dict[str, Any] = {
            "label": label,
            **chosen._asdict(),
            "gpus": list(chosen.gpus),
            "lone_preferred": chosen.lone,
            "params": dict(chosen.params),
            "server": dict(chosen.server),
        }
        del variant["lone"]
        name = (
            "-".join(
                [
                    "server",
                    *(str(x) for x in chosen[:2]),
                    "+".join(map(str, chosen.gpus)),
                    str(chosen.delay_us),
                    str(chosen.lone),
                    *(f"{k}={value}" for k, value in chosen.params),
                    *(f"{k}={value}" for k, value in chosen.server),
                ]
            )
            + ".log"
        )
        variant["rows"] = []
        for protocol in args.protocol:
            levels = [n for n in args.levels if protocol != "http" or n <= HTTP_MAX_IN_FLIGHT]
            try:
                variant["rows"] += sweep(
                    repo,
                    part,
                    levels,
                    args.seconds,
                    log,
                    log_file=work / name.replace(".log", f"-{protocol}.log"),
                    processes=args.client_processes,
                    protocol=protocol,
                    server_args=tuple(f"--{k}={value}" for k, value in chosen.server),
                )
            except Exception as exc:  # the rest still run; the table says why this one is empty
                variant["error"] = f"{protocol}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                log(f"{label} failed: {variant['error']}")
        data["variants"].append(variant)
        save_figures(data)
    return data


def _f(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def render(data: dict[str, Any]) -> str:
    """The A/B table: per variant and level the served rate against the in-process peak of the engine
    it serves, latency, batches and Triton's split, then the peaks."""
    batch, top = peak(data["in_process"]) if data.get("in_process") else (0, 0.0)
    native_batch, native_top = (
        peak(data["in_process_native"]) if data.get("in_process_native") else (batch, top)
    )
    lines = [
        f"# Python torch runner vs native backend: `{data['model']}`"
        + (" (dry run, CPU)" if data.get("dry_run") else ""),
        "",
        f"In-process peak {top:,.0f} samples/s (batch {batch}; the program the python runner serves)"
        + (
            f", {native_top:,.0f} (batch {native_batch}) for the traced methods the native backend replays"
            if data.get("in_process_native")
            else ""
        )
        + f"; each variant's ratio is against the engine it serves. Requests of one row, {data['seconds']:g} s "
        f"per level, at most {data.get('client_processes', 8)} client processes of the generator each row's "
        "JSON names (perf_analyzer where installed, else tritonkit's; front ends: grpc = unary calls, "
        "grpc-stream = Triton's ModelStreamInfer in earlier runs, http = HTTP/1.1 with the binary tensor "
        "extension).",
        "",
        "| variant | front end | in flight | samples/s | / peak in-process | p50 ms | p99 ms | avg batch | padded | queue µs/req "
        "| input / infer / output µs per execution | GPU util % | server CPU % | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    peaks: list[str] = []
    for v in data.get("variants", []):
        if v.get("error"):
            lines.append(f"| {v['label']} | – | – | failed: {v['error']} | | | | | | | | | | |")
        if not v.get("rows"):
            continue
        engine = native_top if v.get("runner") == "native" else top
        for r in v["rows"]:
            split = (
                f"{r['compute_input_us']:,.0f} / {r['compute_infer_us']:,.0f} / {r['compute_output_us']:,.0f}"
            )
            lines.append(
                f"| {v['label']} | {r.get('protocol', 'grpc')} | {r['in_flight']} | {r['samples_per_s']:,.0f} | "
                f"{r['samples_per_s'] / engine if engine else 0:.2f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                f"{r['avg_batch']:.1f} | {100 * (r['padded_share'] or 0):.1f} % | {r['queue_us']:,.0f} | {split} | "
                f"{_f(r['gpu_util'])} | {100 * r['server_cpu_share']:.1f} | {r['errors']} |"
            )
        for protocol in dict.fromkeys(r.get("protocol", "grpc") for r in v["rows"]):
            rows = [r for r in v["rows"] if r.get("protocol", "grpc") == protocol]
            best = max(rows, key=lambda r: r["samples_per_s"])
            peaks.append(f"{v['label']}, {protocol}: {best['samples_per_s']:,.0f} at c{best['in_flight']}"
                         f" ({best['samples_per_s'] / engine if engine else 0:.2f} of in-process)")  # fmt: skip
    return "\n".join([*lines, "", "Peak served per variant: " + "; ".join(peaks) + ".", ""])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.dry_run:
        import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

        if not torch.cuda.is_available():
            print("tritonkit_bench.gpu_ab: expected a CUDA GPU; torch sees none (--dry-run runs on the CPU)", file=sys.stderr)  # fmt: skip
            return 2

    def save_figures(data: dict[str, Any]) -> None:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(render(data), encoding="utf-8")
        if args.raw:
            Path(args.raw).write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")

    data = measure(args, save_figures)
    save_figures(data)
    log("done")
    print(render(data))
    return 0 if all(not v.get("error") for v in data["variants"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
