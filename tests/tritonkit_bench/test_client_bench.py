"""Smoke test of the client benchmark section (quick mode): it runs against the real server and
reports every table with figures from the run. Speed itself is judged in docs/benchmarks.md."""

from __future__ import annotations

import re

from tritonkit_bench import client as bench


def test_quick_bench_section() -> None:
    text = bench.run(quick=True)
    assert text.startswith("## Client overhead over raw tritonclient")
    assert "Machine: " in text and "logical cores" in text
    latency = re.findall(
        r"^\| (http|grpc) \| (\d+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([+-]\d+\.\d) % "
        r"\| ([\d,]+) \| ([\d,]+) \|$",
        text,
        re.M,
    )
    assert [row[0] for row in latency] == ["http", "grpc"]
    for row in latency:
        assert int(row[1]) > 0 and all(int(v.replace(",", "")) > 0 for v in (*row[2:6], *row[7:]))
    throughput = re.findall(
        r"^\| (http|grpc) \| 32 \| ([\d,]+) \| ([\d,]+) \| (\d+\.\d\d) \| (\d+\.\d\d) \| ([\d,]+) \| ([\d,]+) \|$",
        text,
        re.M,
    )
    assert [row[0] for row in throughput] == ["http", "grpc"]
    for _, raw, ours, median_ratio, total_ratio, raw_cpu, our_cpu in throughput:
        assert int(raw_cpu.replace(",", "")) > 0 and int(our_cpu.replace(",", "")) > 0
        raw_rate, our_rate = int(raw.replace(",", "")), int(ours.replace(",", ""))
        assert raw_rate > 0 and our_rate > 0 and float(median_ratio) > 0
        assert abs(our_rate / raw_rate - float(total_ratio)) < 0.02
