"""Device-plugin benchmarks (issue 10): the plugin over its unix socket against a bare grpcio echo
server over a unix socket, measured in the same run; never asserted in tests.

- ``Allocate``: p50/p99 of the decision and response (the pods are answered from memory, so what is
  timed is the plugin's own work plus one gRPC round trip) against the echo's p50/p99;
- the identification round trips on the same calls, reported separately: how many outbound calls one
  ``Allocate`` makes (pod-resources ``List``, API server pod list) and their latency, measured against
  the test suite's kubelet and API-server stand-ins over a unix socket and loopback HTTP;
- ``GetPreferredAllocation`` p50 against the echo's;
- how long a ledger change takes to reach a ``ListAndWatch`` stream;
- ``device-manager serve`` RSS with all nine backends registered;
- (``bench/durable_bench.py``, issue 18) ``Allocate`` through the watch-backed pod view and the durable
  annotation PATCH against the echo plus one PATCH, Pod deleted -> tokens Healthy on the stream, the
  restart with 110 Pods, and ``dm serve``'s RSS with 110 Pods watched -- against the API-server
  stand-in, or with ``--api kube-local`` a real ``kube-apiserver`` started for the run.

Run: python bench/allocate_bench.py [--calls 2000] [--api standin|kube-local] [--only-durable]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def percentile(samples: list[float], pct: float) -> float:
    ordered = sorted(samples)
    k = max(0, min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1))))
    return ordered[k]


def timed(call: Callable[[], object], calls: int, warmup: int = 50) -> list[float]:
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples


def echo_server(socket_path: str) -> grpc.Server:
    """A bare grpcio server over a unix socket whose one method returns its request bytes."""

    def echo(request: bytes, _context: grpc.ServicerContext) -> bytes:
        return request

    handler = grpc.method_handlers_generic_handler(
        "bench.Echo",
        {"Echo": grpc.unary_unary_rpc_method_handler(echo)},  # bytes in, bytes out: no (de)serialiser
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    return server


def line(name: str, samples: list[float], base: list[float] | None = None) -> str:
    p50, p99 = percentile(samples, 50) * 1e3, percentile(samples, 99) * 1e3
    text = f"{name:<44} p50 {p50:7.3f} ms   p99 {p99:7.3f} ms"
    if base:
        text += f"   = {p50 / (percentile(base, 50) * 1e3):4.2f}x / {p99 / (percentile(base, 99) * 1e3):4.2f}x echo"
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument(
        "--api",
        choices=["standin", "kube-local"],
        default="standin",
        help="the API server of the durable half: the HTTP stand-in (default) or a real kube-apiserver "
        "started for the run (kube-local; needs root)",
    )
    parser.add_argument("--only-durable", action="store_true", help="skip the in-process plugin half")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dp-bench-") as tmp:
        echo_sock = f"{tmp}/echo.sock"
        server = echo_server(echo_sock)
        channel = grpc.insecure_channel(f"unix://{echo_sock}")
        stub = channel.unary_unary("/bench.Echo/Echo")
        try:
            bare = timed(lambda: stub(b"x" * 200, timeout=5), args.calls)
            print(line("bare grpcio echo (unix socket, 200 B)", bare))
            from bench import plugin_bench  # noqa: PLC0415 (the plugin half: the allocator and its edge)

            # the echo carries the very request bytes each plugin call carries, in calls interleaved
            # with the plugin's (the same machine noise hits both)
            if not args.only_durable:
                plugin_bench.run(Path(tmp), args.calls, lambda payload: stub(payload, timeout=5), line)
            from bench import durable_bench  # noqa: PLC0415 (issue 18: the watch view and the annotation)

            durable_bench.run(Path(tmp), min(args.calls, 500), lambda payload: stub(payload, timeout=5), line, args.api)
            durable_bench.bench_restart(Path(tmp))
            durable_bench.bench_rss_watched(Path(tmp), args.api)
        finally:
            channel.close()
            server.stop(0)
    return 0


if __name__ == "__main__":
    threading.excepthook = lambda a: None  # a stream cancelled at teardown is not a result
    sys.exit(main())
