"""Benchmarks (grown per issue). Run: make bench. Prints ratios against baselines measured in the
same run; never asserted in tests.

The process measurements (``dm detect`` against ``python -c pass``, and where its start-up goes) run
every command with a bytecode cache, as an installed package has one: ``PYTHONDONTWRITEBYTECODE`` is
dropped and ``PYTHONPYCACHEPREFIX`` points at a temporary directory (the tree is never written), warmed
by one uncounted run. The same ``dm detect`` as this environment would run it (its own bytecode
settings) is printed beside it: with ``PYTHONDONTWRITEBYTECODE=1`` and no cache in the tree, every
call compiles the package's sources again.

Run: python bench/run.py [--runs 11] [--only passes|isolation|process]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpustack_operator import api
from gpustack_operator.discovery.detect import detect_document, detect_node, monitor_node
from gpustack_operator.discovery.isolate import isolated_detect, isolated_monitor
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.base import DetectContext, bus_shows_none

REPO = Path(__file__).resolve().parent.parent
HOSTS = REPO / "tests" / "fixtures" / "hosts"
BIN = Path(sys.executable).parent


def wall(cmd: list[str], runs: int = 5, env: dict[str, str] | None = None) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=False, env=env)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def wall_samples(cmds: dict[str, list[str]], runs: int, env: dict[str, str] | None) -> dict[str, list[float]]:
    """``runs`` wall times of each command, the commands alternated run by run (machine noise hits all
    alike), after one uncounted run of each (the bytecode cache, the page cache)."""
    samples: dict[str, list[float]] = {key: [] for key in cmds}
    for _ in range(runs + 1):
        for key, cmd in cmds.items():
            start = time.perf_counter()
            subprocess.run(cmd, capture_output=True, check=False, env=env)
            samples[key].append(time.perf_counter() - start)
    return {key: values[1:] for key, values in samples.items()}


def walls(cmds: dict[str, list[str]], runs: int, env: dict[str, str] | None) -> dict[str, float]:
    """The median of :func:`wall_samples`."""
    return {key: statistics.median(values) for key, values in wall_samples(cmds, runs, env).items()}


def cached_env(cache: Path) -> dict[str, str]:
    """The environment with a bytecode cache in ``cache`` (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def detect_cpu_per_pass(host: str, passes: int = 20) -> float:
    """CPU time of one detect pass and its document, in process (``api.detect`` forks the vendor code,
    whose CPU time this process's clock would not count: the isolation bench measures that)."""
    req = api.make_request(str(HOSTS / host), None)
    view = HostRoot(req.root)
    start = time.process_time()
    for _ in range(passes):
        detect_document(detect_node(view, req.resolved, req.settings))
    return (time.process_time() - start) / passes


def isolation_cost(host: str, passes: int = 15) -> tuple[float, float, int]:
    """Wall time of one detect pass in process vs with vendor code isolated in forked children
    (discovery/isolate.py, what every command runs); and how many manufacturers were forked."""
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


def monitor_isolation_cost(host: str, passes: int = 15) -> tuple[float, float]:
    """Wall time of one monitor pass in process vs each manufacturer sampled in a forked child
    (discovery/isolate.py, what ``dm monitor`` runs)."""
    req = api.make_request(str(HOSTS / host), None)
    view = HostRoot(req.root)
    inproc, isolated = [], []
    for _ in range(passes):
        start = time.perf_counter()
        monitor_node(view, req.resolved, req.settings)
        inproc.append(time.perf_counter() - start)
        start = time.perf_counter()
        monitor_node(view, req.resolved, req.settings, sampler=isolated_monitor)
        isolated.append(time.perf_counter() - start)
    return statistics.median(inproc), statistics.median(isolated)


# The start-up breakdown: each step adds to the one before it, as `dm detect` meets them. pydantic is
# counted with the first model class built (the class build imports pydantic.fields and the rest of
# what any model needs), with plugins off as the console script has them and its plugin loader stood
# in for as the package does (``import gpustack_operator``: pydantic_plugins.py); the same without the
# stand-in is printed beside it.
PYDANTIC_FLOOR = "from pydantic import BaseModel\nclass Probe(BaseModel):\n    x: int\nProbe(x=1)"
STOOD_IN = "import gpustack_operator\n"
STARTUP_STEPS = {
    "python -c pass": "pass",
    "+ import pydantic": "import pydantic",
    "+ a first pydantic model": STOOD_IN + PYDANTIC_FLOOR,
    "+ import yaml": STOOD_IN + PYDANTIC_FLOOR + "\nimport yaml",
    "+ from gpustack_operator import api": "import yaml\nfrom gpustack_operator import api",
    "+ import gpustack_operator.cli": "import yaml\nimport gpustack_operator.cli",
}
OWN_LOADER = "a first pydantic model, pydantic's own plugin loader"


def process_numbers(runs: int) -> None:
    """``dm detect`` as a process against ``python -c pass`` (target: <= 10x), and the floor under it."""
    detect_args = ["dm", "detect", "--detect-root", str(HOSTS / "h100-sxm-8x")]
    detect = [str(BIN / "gpustack-operator"), *detect_args]
    with tempfile.TemporaryDirectory(prefix="gpa-bench-pyc-") as cache:
        env = cached_env(Path(cache))
        steps = {label: [sys.executable, "-c", code] for label, code in STARTUP_STEPS.items()}
        steps["dm detect h100-sxm-8x (the command)"] = detect
        steps[OWN_LOADER] = [sys.executable, "-c", PYDANTIC_FLOOR]
        samples = wall_samples(steps, runs, {**env, "PYDANTIC_DISABLE_PLUGINS": "__all__"})
        both = walls({"pass": [sys.executable, "-c", "pass"], "detect": detect}, runs, env)
    as_is = walls({"pass": [sys.executable, "-c", "pass"], "detect": detect}, runs, None)
    base, det = both["pass"], both["detect"]
    verdict = "met" if det / base <= 10 else "MISSED"
    print(f"== dm detect as a process vs python -c pass (median of {runs}, alternated; bytecode cache)")
    print(f"  python -c pass  {base * 1000:8.1f} ms")
    print(f"  dm detect h100  {det * 1000:8.1f} ms   ratio {det / base:5.1f}x   (target <= 10x: {verdict})")
    dont = os.environ.get("PYTHONDONTWRITEBYTECODE") or "unset"
    ratio = as_is["detect"] / as_is["pass"]
    print(
        f"  as this environment runs it (PYTHONDONTWRITEBYTECODE={dont}): python -c pass "
        f"{as_is['pass'] * 1000:.1f} ms, dm detect {as_is['detect'] * 1000:.1f} ms, ratio {ratio:.1f}x"
    )
    # the minimum beside the median: on a shared machine it is the steadier estimate of what a step
    # costs, and the steps are read against each other (a median can put a step below the one before)
    print(f"== where dm detect's time goes (of {runs}, alternated; each line includes the ones above)")
    print(f"  {'':<40} {'median':>8}    {'min':>8}    {'+ min':>8}    median / python -c pass")
    least = {label: min(values) for label, values in samples.items()}
    numbers = {label: statistics.median(values) for label, values in samples.items()}
    own_loader, least_own = numbers.pop(OWN_LOADER), least.pop(OWN_LOADER)
    bare, before = numbers["python -c pass"], 0.0
    for label, seconds in numbers.items():
        step = f"+{(least[label] - before) * 1000:6.1f} ms" if before else " " * 9 + "  "
        print(f"  {label:<40} {seconds * 1000:8.1f} ms {least[label] * 1000:8.1f} ms  {step}   {seconds / bare:5.1f}x")
        before = least[label]
    stood_in = numbers["+ a first pydantic model"]
    bought = (own_loader - stood_in) * 1000, (least_own - least["+ a first pydantic model"]) * 1000
    print(
        f"  ({OWN_LOADER}: {own_loader * 1000:.1f} ms, min {least_own * 1000:.1f} ms; the stand-in buys "
        f"{bought[0]:.1f} ms (median), {bought[1]:.1f} ms (min))"
    )
    floor = numbers["+ import yaml"]
    above = numbers["dm detect h100-sxm-8x (the command)"] - floor
    print(
        f"  the floor (python + pydantic with one model + yaml): {floor * 1000:.1f} ms = {floor / bare:.1f}x "
        f"python -c pass; above it, the package's imports and the pass: {above * 1000:.1f} ms"
    )
    print(f"  machine: {os.cpu_count()} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=11, help="runs per process measurement (default 11)")
    parser.add_argument("--only", choices=["passes", "isolation", "process"], action="append")
    args = parser.parse_args(argv)
    only = set(args.only or ["passes", "isolation", "process"])
    logging.disable(logging.CRITICAL)  # fixture nodes without /sys/class/net log on every pass
    if "passes" in only:
        print("== detection pass (in process, CPU time per pass)")
        for host in ("h100-sxm-8x", "mi300x-8x", "ascend-910b-8x"):
            print(f"  {host:<24} {detect_cpu_per_pass(host) * 1000:8.2f} ms")
    if "isolation" in only:
        print("== isolation: detect / monitor pass in process vs vendor code in forked children (median wall)")
        for host in ("h100-sxm-8x", "mixed-cambricon-metax", "cpu-only-vm"):
            inproc, isolated, forked = isolation_cost(host)
            per = (isolated - inproc) / forked * 1000 if forked else 0.0
            print(
                f"  detect  {host:<24} in process {inproc * 1000:7.1f} ms   isolated {isolated * 1000:7.1f} ms   "
                f"forked {forked}   +{per:5.1f} ms per forked manufacturer"
            )
            inproc, isolated = monitor_isolation_cost(host)
            per = (isolated - inproc) / forked * 1000 if forked else 0.0
            print(
                f"  monitor {host:<24} in process {inproc * 1000:7.1f} ms   isolated {isolated * 1000:7.1f} ms   "
                f"forked {forked}   +{per:5.1f} ms per forked manufacturer"
            )
    if "process" in only:
        process_numbers(args.runs)


if __name__ == "__main__":
    main()
