"""Fleet report benchmark. Run: python bench/report_bench.py [--hosts 300 --hosts 1000] [--keep DIR].

Prints numbers, asserts nothing. The fleet is generated from real preflight documents: the package's
own preflight over each node shape of examples/simulated-fleet (the fixture hosts), registered as the
``preflight`` module registers them, then repeated round-robin to ``--hosts`` hosts (every 97th host
unreachable, every 331st with a failed task, every 23rd expecting one accelerator more than it has,
every 7th expecting exactly what it has); each shape preflighted (a dry run) on a copy of its fixture,
with its capability rows (questions 2 and 3) or, ``--no-capabilities``, without. For each size:

- the fleet report (the collection's ``plugins/module_utils/fleet_report.py``, standard library only):
  build, YAML, HTML and JUnit times and sizes. Targets at 1,000 hosts: HTML <= 1 MB;
- headless Chromium on the HTML (targets at 1,000 hosts: rendered in <= 2 s): the page's own
  measure -- navigation start to the end of a forced style + layout of the whole page, by a probe
  script appended to a copy (the report has none) -- and the wall time of a ``--screenshot`` run
  (parse, style, layout, paint, raster) less that of the same run on an empty page (browser start).

Chromium runs in a loopback-only network namespace when this runs as root, so nothing leaves the
machine whatever it tries; otherwise with its background networking disabled.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "collections"))  # ansible_collections.gpustack.accelerators -> this repository
sys.path.insert(0, str(REPO))

from ansible_collections.gpustack.accelerators.plugins.module_utils import fleet_report as fleet  # noqa: E402
from gpustack_operator import api  # noqa: E402

from tests.tools import netns_hosts as nh  # noqa: E402

FLEET = REPO / "examples" / "simulated-fleet" / "inventory.yml"
HOSTS = REPO / "tests" / "fixtures" / "hosts"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-features=OptimizationHints,MediaRouter,Translate,AutofillServerCommunication",
    "--metrics-recording-only",
    "--hide-scrollbars",
    "--window-size=1400,900",
]
PROBE = """<script>
document.body.getBoundingClientRect(); document.body.offsetHeight;  // style + layout of the whole page
const gpaProbe = document.createElement("pre");
gpaProbe.id = "gpa-probe";
const gpaRows = document.querySelectorAll("#hosts tbody tr").length;
gpaProbe.textContent = JSON.stringify({laidOut: performance.now(), rows: gpaRows});
document.body.appendChild(gpaProbe);
</script>"""


def fixture_results(capabilities: bool | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(fixture host, registered result) for each node shape of the simulated fleet, each preflighted
    (a dry run) on a copy of its fixture -- never the tracked tree: a pass answering the capability
    questions drives the vendor stand-ins, which rewrite their state. ``capabilities``: with or
    without the capability rows (``None``: the package's default)."""
    logging.disable(logging.WARNING)  # the fixture nodes' own warnings (no /sys/class/net, ...)
    with (
        open(os.devnull, "w") as quiet,
        contextlib.redirect_stderr(quiet),
        tempfile.TemporaryDirectory(prefix="gpa-report-bench-hosts-") as copies,
    ):
        return _fixture_results(Path(copies), capabilities)


def _fixture_results(copies: Path, capabilities: bool | None) -> list[tuple[str, dict[str, Any]]]:

    inventory = yaml.safe_load(FLEET.read_text())
    shapes: list[tuple[str, list[str] | None]] = []
    for group in inventory["all"]["children"].values():
        for spec in group["hosts"].values():
            shapes.append((spec["gpustack_host_root"].rsplit("/", 1)[-1], spec.get("gpustack_manufacturers")))
    out = []
    choice: dict[str, bool] = {} if capabilities is None else {"capabilities": capabilities}
    for name, manufacturers in shapes:
        root = str(copies / name)
        if not os.path.exists(root):
            shutil.copytree(HOSTS / name, root, symlinks=True)
        report = api.run_preflight(api.make_request(root, manufacturers), dry_run=True, host_root=root, **choice)
        failures = report.failures()
        result: dict[str, Any] = {
            "changed": False,
            "report": report.wire(),
            "summary": report.summary(),
            "failures": failures,
        }
        if failures:
            result.update(failed=True, msg="preflight: " + "; ".join(failures))
        out.append((name, result))
    return out


def fleet_of(
    shapes: list[tuple[str, dict[str, Any]]], hosts: int
) -> tuple[list[tuple[str, dict[str, Any] | None]], dict[str, Any]]:
    results: list[tuple[str, dict[str, Any] | None]] = []
    expect: dict[str, Any] = {}
    for i in range(hosts):
        _, result = shapes[i % len(shapes)]
        host = f"node-{i:04d}"
        if i % 97 == 96:
            results.append(
                (
                    host,
                    {
                        "unreachable": True,
                        "msg": f"Failed to connect to the host via ssh: ssh: connect to host "
                        f"10.0.{i // 250}.{i % 250} port 22: Connection timed out",
                    },
                )
            )
            continue
        if i % 331 == 330:
            results.append(
                (
                    host,
                    {
                        "failed": True,
                        "msg": "Failed to import the required Python library (gpustack-operator) on "
                        f"{host}'s Python /usr/bin/python3. install it into the Python interpreter Ansible uses",
                    },
                )
            )
            continue
        results.append((host, result))
        counts: dict[str, int] = {}
        for group in result["report"]["accelerators"]:
            if group["detection"]["state"] == "ok":
                counts[group["manufacturer"]] = group["detection"]["accelerators"]
        if counts and i % 23 == 0:
            first = sorted(counts)[0]
            expect[host] = {**counts, first: counts[first] + 1}
        elif counts and i % 7 == 0:
            expect[host] = counts
    return results, expect


def timed(fn: Any, *args: Any, runs: int = 3) -> tuple[float, Any]:
    samples, value = [], None
    for _ in range(runs):
        start = time.perf_counter()
        value = fn(*args)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), value


# --- Chromium --------------------------------------------------------------------------------------


@contextlib.contextmanager
def browser(work: Path) -> Iterator[list[str] | None]:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        yield None
        return
    home = work / "chromium-home"
    base = [
        "env",
        f"HOME={home}",
        f"XDG_CONFIG_HOME={home / 'config'}",
        f"XDG_CACHE_HOME={home / 'cache'}",
        "DBUS_SESSION_BUS_ADDRESS=disabled:",
        binary,
        *CHROMIUM_FLAGS,
        f"--user-data-dir={home / 'profile'}",
    ]
    if nh.unavailable() is None:
        with nh.isolated_netns(f"gpa-bench-{os.getpid()}") as prefix:
            yield [*prefix, *base]
    else:
        yield base


def run(cmd: list[str], timeout: float = 120) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        out, err = proc.communicate()
    return time.perf_counter() - start, subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def chromium_numbers(cmd: list[str], page: Path, work: Path, runs: int) -> dict[str, float]:
    probed = work / f"probed-{page.name}"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    laid_out = []
    for _ in range(runs):
        _, proc = run([*cmd, "--dump-dom", probed.as_uri()])
        marker = proc.stdout.split('<pre id="gpa-probe">', 1)
        if len(marker) == 2:
            laid_out.append(json.loads(marker[1].split("</pre>", 1)[0].replace("&quot;", '"'))["laidOut"] / 1000)
    blank = work / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>\n")
    shots, baseline = [], []
    for i in range(runs):
        wall, _ = run([*cmd, f"--screenshot={work / f'blank-{i}.png'}", blank.as_uri()])
        baseline.append(wall)
        wall, _ = run([*cmd, f"--screenshot={work / f'{page.stem}-{i}.png'}", page.as_uri()])
        shots.append(wall)
    return {
        "laid_out": statistics.median(laid_out) if laid_out else float("nan"),
        "screenshot": statistics.median(shots),
        "baseline": statistics.median(baseline),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, action="append", help="fleet sizes (default 300 and 1000)")
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement (median; default 3)")
    parser.add_argument("--keep", type=Path, help="write the reports (and screenshots) here instead of a temp dir")
    parser.add_argument("--no-browser", action="store_true", help="skip the Chromium measurements")
    parser.add_argument(
        "--capabilities",
        action=argparse.BooleanOptionalAction,
        help="preflight the node shapes with (or without) their capability rows (default: the package's default)",
    )
    args = parser.parse_args(argv)
    sizes = args.hosts or [300, 1000]
    start = time.perf_counter()
    shapes = fixture_results(args.capabilities)
    rows = sum(len(g.get("checks") or []) for _, r in shapes for g in r["report"]["accelerators"])
    print(
        f"== {len(shapes)} node shapes preflighted from the fixture hosts in {time.perf_counter() - start:.1f} s"
        f" ({rows} capability rows)"
    )
    with contextlib.ExitStack() as stack:
        work = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpa-report-bench-")))
        work.mkdir(parents=True, exist_ok=True)
        cmd = None if args.no_browser else stack.enter_context(browser(work))
        for hosts in sizes:
            results, expect = fleet_of(shapes, hosts)
            build_s, report = timed(fleet.build, results, expect, runs=args.runs)
            yaml_s, text_yaml = timed(fleet.to_yaml, report, runs=args.runs)
            html_s, text_html = timed(fleet.to_html, report, runs=args.runs)
            junit_s, text_junit = timed(fleet.to_junit, report, runs=args.runs)
            paths = fleet.write(report, work / f"fleet-{hosts}")
            s = report["summary"]
            print(
                f"== {hosts} hosts: {fleet.summary_line(s)}; {len(report['causes'])} causes, "
                f"{len(report['models'])} models"
            )
            print(f"  build                 {build_s * 1000:8.0f} ms")
            for name, secs, text in (
                ("YAML", yaml_s, text_yaml),
                ("HTML", html_s, text_html),
                ("JUnit", junit_s, text_junit),
            ):
                size = len(text.encode("utf-8"))
                print(f"  {name:<6} {size / 1e6:7.3f} MB  {secs * 1000:8.0f} ms  ({size / hosts:6.0f} B/host)")
            size_html = len(text_html.encode("utf-8"))
            if hosts >= 1000:
                verdict = "met" if size_html <= 1_000_000 else "MISSED"
                print(f"  HTML size target <= 1 MB at {hosts} hosts: {verdict}")
            if cmd is None:
                why = "" if args.no_browser else " (no chromium: tests/tools/system_deps.sh)"
                print("  chromium: not measured" + why)
                continue
            numbers = chromium_numbers(cmd, Path(paths["html"]), work, args.runs)
            painted = numbers["screenshot"] - numbers["baseline"]
            print(f"  chromium, in page: navigation start -> whole page laid out  {numbers['laid_out'] * 1000:8.0f} ms")
            print(
                f"  chromium --screenshot wall {numbers['screenshot'] * 1000:6.0f} ms - empty page "
                f"{numbers['baseline'] * 1000:6.0f} ms = {painted * 1000:6.0f} ms for this page"
            )
            if hosts >= 1000:
                worst = max(numbers["laid_out"], painted)
                print(f"  render target <= 2 s at {hosts} hosts: {'met' if worst <= 2 else 'MISSED'} ({worst:.2f} s)")
        if args.keep:
            print(f"reports and screenshots kept under {work}")


if __name__ == "__main__":
    main()
