"""``tritonkit bench``: run every benchmark section in one process and write ``docs/benchmarks.md``.

Benchmarks, not tests: figures depend on the machine, so the page names it, and each section
compares ratios measured in the same run against the same server. ``--only`` runs some sections and
replaces only theirs in the page (a section is its ``## `` heading and what follows it up to the next).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import inspect
from pathlib import Path

from tritonkit.errors import TritonKitError
from tritonkit.machine import description

#: (title, module exposing ``run(quick: bool) -> str``)
SECTIONS: tuple[tuple[str, str], ...] = (
    ("client", "tritonkit_bench.client"),
    ("loadtest", "tritonkit_bench.loadtest"),
    ("tune", "tritonkit_bench.tune"),
    ("compare", "tritonkit_bench.compare"),
    ("users-ab", "tritonkit_bench.users_ab"),
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
        help="run only these sections (repeatable); the page keeps its other sections",
    )
    parser.add_argument(
        "--base",
        metavar="REV",
        help="users-ab: the commit whose Locust users this tree's are measured against "
        "(default: the one tritonkit_bench.users_ab names)",
    )
    parser.set_defaults(func=run)


def merge_sections(page: str, sections: list[str]) -> str:
    """``page`` with each of ``sections`` in place of the section with its ``## `` heading (appended
    when the page has none)."""
    lines = page.rstrip("\n").split("\n")
    starts = [i for i, line in enumerate(lines) if line.startswith("## ")]
    parts = ["\n".join(lines[: starts[0] if starts else len(lines)])]
    parts += ["\n".join(lines[a:b]) for a, b in zip(starts, [*starts[1:], len(lines)], strict=True)]
    for section in sections:
        heading = section.split("\n", 1)[0]
        index = next((i for i, part in enumerate(parts) if part.split("\n", 1)[0] == heading), None)
        if index is None:
            parts.append(section)
        else:
            parts[index] = section
    return "\n\n".join(part.strip("\n") for part in parts) + "\n"


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
        "16-core host: [benchmarks-gpu-host.md](benchmarks-gpu-host.md). GPU serving (the python and the native",
        "runner, each GPU, host and date named): [benchmarks-gpu.md](benchmarks-gpu.md).",
        "",
    ]
    wanted = set(args.only or [s for s, _ in SECTIONS])
    sections = []
    for title, module_name in SECTIONS:
        if title not in wanted:
            continue
        print(f"tritonkit bench: running {title} ...", flush=True)
        section_run = importlib.import_module(module_name).run
        takes_base = args.base is not None and "base" in inspect.signature(section_run).parameters
        given = {"base": args.base} if takes_base else {}
        sections.append(section_run(quick=args.quick, **given).rstrip())
    if args.only and output.exists() and output.read_text().strip():
        output.write_text(merge_sections(output.read_text(), sections))
        print(f"tritonkit bench: replaced {', '.join(sorted(wanted))} in {output}", flush=True)
        return 0
    output.write_text("\n".join(parts + [p for section in sections for p in (section, "")]))
    print(f"tritonkit bench: wrote {output}", flush=True)
    return 0
