"""Preflight's probes against a real dockerd (issue 11's performance goals), ratios against a baseline
measured in the same run:

* wall time per probe container of a full preflight on the 8-accelerator H100 fixture (24 probes: one
  per accelerator, then two together for co-tenancy) vs a bare ``docker run --rm <probe image> true``
  through the same host root -- target <= 1.5x;
* what the lock and the stale sweep add to a run (acquire + sweep with nothing to remove, the run's own
  code against the same daemon) -- target <= 100 ms.

The engine is tests/tools/container_host.py (Debian's docker.io pivoted into an overlay of /); the
probe image is its debootstrap image with the stand-in vendor readers. Run: ``python bench/probe_bench.py``
(root; ``make bench``)."""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpustack_operator.host import HostRoot  # noqa: E402
from gpustack_operator.preflight.hostexec import HostExec  # noqa: E402
from gpustack_operator.preflight.lock import acquire  # noqa: E402
from gpustack_operator.preflight.probe import Prober  # noqa: E402
from gpustack_operator.preflight.runtime import RuntimeName, RuntimeResolution  # noqa: E402
from gpustack_operator.preflight.sweep import sweep  # noqa: E402

from tests.conftest import fresh_node  # noqa: E402
from tests.stubs.build import build_all  # noqa: E402
from tests.tools.container_host import PROBE_IMAGE, ContainerHost, cannot_run, preload_library  # noqa: E402

H100 = REPO / "tests/fixtures/hosts/h100-sxm-8x"
BARE_RUNS = 12
RUNS = 3


def main() -> int:
    reason = cannot_run()
    if reason:
        print(f"probe bench: cannot run here: {reason}", file=sys.stderr)
        return 1
    build_all()
    work = Path(tempfile.mkdtemp(prefix="probe-bench-"))
    host = ContainerHost.start(H100)
    try:
        view = work / "view"
        shutil.copytree(H100, view, symlinks=True, ignore=fresh_node)
        src = work / "lib/nvidia/cuda-12"
        src.mkdir(parents=True)
        shutil.copy2(preload_library(), src / "libvgpu.so")
        host.docker("run", "--rm", "--network", "none", PROBE_IMAGE, "true", check=True)  # warm
        bare: list[float] = []
        per_probe: list[float] = []
        for _ in range(RUNS):
            for _ in range(BARE_RUNS // RUNS):
                t0 = time.perf_counter()
                host.docker("run", "--rm", "--network", "none", PROBE_IMAGE, "true", check=True)
                bare.append(time.perf_counter() - t0)
            per_probe.extend(preflight_probe_times(view, host, work / "lib"))
        resolution = RuntimeResolution(runtime=RuntimeName.DOCKER, binary="/usr/bin/docker", source="bench")
        runner = HostExec(str(host.root))
        guard: list[float] = []
        for _ in range(10):
            t0 = time.perf_counter()
            held = acquire(HostRoot(str(host.root)))
            result = sweep(runner, resolution, [])
            held.release()
            guard.append(time.perf_counter() - t0)
            assert result.ok
    finally:
        host.stop()
        shutil.rmtree(work, ignore_errors=True)
    b, p = statistics.median(bare), statistics.median(per_probe)
    print(f"bare docker run --rm {PROBE_IMAGE} true: median {b * 1000:.0f} ms over {len(bare)}")
    print(
        f"preflight probe (8x H100, {len(per_probe) // RUNS} probes a run, {RUNS} runs): median {p * 1000:.0f} ms "
        f"= {p / b:.2f}x bare (target <= 1.5x: {'met' if p / b <= 1.5 else 'MISSED'})"
    )
    g = statistics.median(guard)
    print(
        f"lock + stale sweep: median {g * 1000:.0f} ms, max {max(guard) * 1000:.0f} ms "
        f"(target <= 100 ms: {'met' if g <= 0.1 else 'MISSED'})"
    )
    return 0


def preflight_probe_times(view: Path, host: ContainerHost, source: Path) -> list[float]:
    """The per-probe wall times of one full preflight, as the run itself measured them (Prober.timings);
    the co-tenancy pair counts as two probes of the pair's wall time each (they run together)."""
    from gpustack_operator import api  # noqa: PLC0415

    captured: list[Prober] = []
    original = Prober.__init__

    def spy(self: Prober, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        captured.append(self)

    Prober.__init__ = spy  # type: ignore[method-assign]
    try:
        req = api.make_request(str(view), ["nvidia"])
        report = api.run_preflight(
            req, runtime="docker", probe_image=PROBE_IMAGE, host_root=str(host.root), preload_source=str(source)
        )
    finally:
        Prober.__init__ = original  # type: ignore[method-assign]
    failures = report.failures()
    if failures:
        raise SystemExit(f"probe bench: the preflight was not ok: {failures[0]}")
    return captured[0].timings


if __name__ == "__main__":
    sys.exit(main())
