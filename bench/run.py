"""Benchmarks (grown per issue). Run: make bench. Prints ratios against baselines measured in the
same run; never asserted in tests."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from gpustack_operator import api

REPO = Path(__file__).resolve().parent.parent
HOSTS = REPO / "tests" / "fixtures" / "hosts"
BIN = Path(sys.executable).parent


def wall(cmd: list[str], runs: int = 5) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=False)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def detect_cpu_per_pass(host: str, passes: int = 20) -> float:
    req = api.make_request(str(HOSTS / host), None)
    start = time.process_time()
    for _ in range(passes):
        api.detect(req)
    return (time.process_time() - start) / passes


def isolation_cost(host: str, passes: int = 15) -> tuple[float, float, int]:
    """Wall time of one preflight detect pass in process vs with vendor code isolated in forked
    children (preflight/isolate.py); and how many manufacturers were forked."""
    from gpustack_operator.discovery.detect import detect_node
    from gpustack_operator.host import HostRoot
    from gpustack_operator.manufacturers.base import DetectContext, bus_shows_none
    from gpustack_operator.preflight.isolate import isolated_detect

    req = api.make_request(str(HOSTS / host), None)
    view = HostRoot(req.root)
    inproc, isolated = [], []
    for _ in range(passes):
        start = time.perf_counter()
        result = detect_node(view, req.resolved, req.settings)
        inproc.append(time.perf_counter() - start)
        start = time.perf_counter()
        isolated_detect(view, req.resolved, req.settings, False)
        isolated.append(time.perf_counter() - start)
    forked = sum(
        1
        for name, resolved in req.resolved.items()
        if not bus_shows_none(DetectContext(view=view, pci=result.pci, settings=req.settings, manufacturer=resolved))
    )
    return statistics.median(inproc), statistics.median(isolated), forked


def main() -> None:
    import logging

    logging.disable(logging.CRITICAL)  # fixture nodes without /sys/class/net log on every pass
    print("== detection pass (in process, CPU time per pass)")
    for host in ("h100-sxm-8x", "mi300x-8x", "ascend-910b-8x"):
        print(f"  {host:<24} {detect_cpu_per_pass(host) * 1000:8.2f} ms")
    print("== preflight isolation: detect pass in process vs vendor code in forked children (median wall)")
    for host in ("h100-sxm-8x", "mixed-cambricon-metax", "cpu-only-vm"):
        inproc, isolated, forked = isolation_cost(host)
        per = (isolated - inproc) / forked * 1000 if forked else 0.0
        print(
            f"  {host:<24} in process {inproc * 1000:7.1f} ms   isolated {isolated * 1000:7.1f} ms   "
            f"forked {forked}   +{per:5.1f} ms per forked manufacturer"
        )
    base = wall([sys.executable, "-c", "pass"])
    det = wall([str(BIN / "gpustack-operator"), "dm", "detect", "--detect-root", str(HOSTS / "h100-sxm-8x")])
    print("== detect as a process vs python -c pass (median of 5)")
    print(f"  python -c pass  {base * 1000:8.1f} ms")
    print(f"  detect h100     {det * 1000:8.1f} ms   ratio {det / base:5.1f}x")


if __name__ == "__main__":
    main()
