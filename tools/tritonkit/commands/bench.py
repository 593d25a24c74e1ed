"""``tritonkit bench``: run every benchmark section in one process and write ``docs/benchmarks.md``.

Benchmarks, not tests: figures depend on the machine, so the page names it, and each section
compares ratios measured in the same run against the same server.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
from pathlib import Path

from tritonkit.errors import TritonKitError
from tritonkit.machine import description

#: (title, module exposing ``run(quick: bool) -> str``)
SECTIONS: tuple[tuple[str, str], ...] = (
    ("client", "tritonkit_bench.client"),
    ("loadtest", "tritonkit_bench.loadtest"),
    ("tune", "tritonkit_bench.tune"),
    ("compare", "tritonkit_bench.compare"),
)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output", default="docs/benchmarks.md", help="Markdown file to write (default %(default)s)"
    )
    parser.add_argument("--quick", action="store_true", help="short runs (smoke test), not for publishing")
    parser.add_argument(
        "--only",
        action="append",
        choices=[s for s, _ in SECTIONS],
        help="run only these sections (repeatable)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    output = Path(args.output)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TritonKitError(f"cannot write {output}: {exc.strerror}; expected a writable path") from None
    parts = [
        "# Benchmarks",
        "",
        f"Written by `tritonkit bench{' --quick' if args.quick else ''}` on "
        f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
        f"Machine: {description()}.",
        "Server and load generator share this machine, so read absolute figures as this machine's and compare the",
        "ratios, which each section measures in one run against the same server. The same sections run on a",
        "16-core host: [benchmarks-gpu-host.md](benchmarks-gpu-host.md).",
        "",
    ]
    wanted = set(args.only or [s for s, _ in SECTIONS])
    for title, module_name in SECTIONS:
        if title not in wanted:
            continue
        print(f"tritonkit bench: running {title} ...", flush=True)
        module = importlib.import_module(module_name)
        parts += [module.run(quick=args.quick).rstrip(), ""]
    if output.exists() and output.read_text().strip() and wanted != {s for s, _ in SECTIONS}:
        print(f"tritonkit bench: note: {output} now holds only the sections run", flush=True)
    output.write_text("\n".join(parts))
    print(f"tritonkit bench: wrote {output}", flush=True)
    return 0
