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


def main() -> None:
    print("== detection pass (in process, CPU time per pass)")
    for host in ("h100-sxm-8x", "mi300x-8x", "ascend-910b-8x"):
        print(f"  {host:<24} {detect_cpu_per_pass(host) * 1000:8.2f} ms")
    base = wall([sys.executable, "-c", "pass"])
    det = wall([str(BIN / "gpustack-operator"), "dm", "detect", "--host-root", str(HOSTS / "h100-sxm-8x")])
    print("== detect as a process vs python -c pass (median of 5)")
    print(f"  python -c pass  {base * 1000:8.1f} ms")
    print(f"  detect h100     {det * 1000:8.1f} ms   ratio {det / base:5.1f}x")


if __name__ == "__main__":
    main()
