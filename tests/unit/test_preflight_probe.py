"""The probe containers' commands, the five emitted-step cases and the evidence parser
(supplement §2.5, §2.6, §2.7 "Slice rows — probes"; preflight/probe.py)."""

from __future__ import annotations

import pytest
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.base import ProbeTraits
from gpustack_operator.manufacturers.respond import Injection
from gpustack_operator.preflight import probe
from gpustack_operator.preflight.hostexec import HostExec
from gpustack_operator.preflight.imageref import parse_image_ref
from gpustack_operator.preflight.runtime import RuntimeName, RuntimeResolution
from hypothesis import given, settings
from hypothesis import strategies as st


def traits(manufacturer: str) -> ProbeTraits:
    t = REGISTRY[manufacturer].identity.preflight.probe
    assert t is not None
    return t


def injection() -> Injection:
    inj = Injection(envs={"NVIDIA_VISIBLE_DEVICES": "GPU-1", "CUDA_DEVICE_MEMORY_LIMIT_0": "40000m"})
    inj.add_device("/dev/nvidia0")
    inj.add_mount("/usr/local/vgpu", "/var/lib/gpustack/operator/lib/nvidia/cuda-12")
    inj.add_mount("/etc/ld.so.preload", "/var/lib/gpustack/operator/preflight/render-1/u/_preload/main")
    inj.add_mount("/tmp/vgpu", "/var/lib/gpustack/operator/preflight/render-1/u/main", read_only=False)
    return inj


def door(runtime: RuntimeName | None, **extra: object) -> probe.Door:
    resolution = RuntimeResolution(
        runtime=runtime,
        binary=f"/usr/bin/{runtime.value}" if runtime else None,
        socket="/run/k3s/containerd/containerd.sock" if runtime in (RuntimeName.NERDCTL, RuntimeName.CTR) else None,
        reason=None if runtime else "nothing states an endpoint and no CLI was found",
        probed=None if runtime else ["docker", "nerdctl", "ctr"],
        emitted=runtime is None,
        **extra,  # type: ignore[arg-type]
    )
    return probe.Door(HostExec("/host"), resolution)


def test_docker_probe_is_exactly_the_injection_never_privileged() -> None:
    args = probe.run_args(RuntimeName.DOCKER, injection(), name="n", image="img", traits=traits("nvidia"))
    assert args[:10] == [
        "run",
        "--rm",
        "--label",
        "gpustack.ai/preflight=true",
        "--name",
        "n",
        "--network",
        "none",
        "--runtime",
        "nvidia",
    ]
    assert "--privileged" not in args and "--gpus" not in args
    assert args[args.index("--device") + 1] == "/dev/nvidia0:/dev/nvidia0:rwm"
    volumes = [args[i + 1] for i, a in enumerate(args) if a == "-v"]
    assert volumes == [
        "/var/lib/gpustack/operator/lib/nvidia/cuda-12:/usr/local/vgpu:ro",
        "/var/lib/gpustack/operator/preflight/render-1/u/_preload/main:/etc/ld.so.preload:ro",
        "/var/lib/gpustack/operator/preflight/render-1/u/main:/tmp/vgpu",
    ]
    envs = [args[i + 1] for i, a in enumerate(args) if a == "-e"]
    assert envs == ["CUDA_DEVICE_MEMORY_LIMIT_0=40000m", "NVIDIA_VISIBLE_DEVICES=GPU-1"]
    assert args[-5:] == ["--entrypoint", "/bin/sh", "img", "-c", probe.script(traits("nvidia").reader)]
    assert "cat /proc/self/maps" in args[-1] and "nvidia-smi --query-gpu=memory.total" in args[-1]


def test_nerdctl_uses_the_namespace_the_socket_and_gpus_for_nvidia() -> None:
    args = probe.run_args(
        RuntimeName.NERDCTL, injection(), name="n", image="img", traits=traits("nvidia"), socket="/run/c.sock"
    )
    assert args[:5] == ["--address", "/run/c.sock", "--namespace", "gpustack-preflight", "run"]
    assert args[args.index("--gpus") + 1] == "device=GPU-1"
    assert "--runtime" not in args


def test_a_runnable_step_is_chrooted_into_the_host() -> None:
    s = probe.step(door(RuntimeName.DOCKER), injection(), name="n", image="img", traits=traits("amd"))
    assert s.emitted is None
    assert s.argv[:4] == ["/usr/sbin/chroot", "/host", "docker", "run"]
    assert "--runtime" not in s.argv  # AMD needs no vendor runtime


def test_case_dry_run_prints_the_command_and_what_is_still_to_do() -> None:
    s = probe.step(
        door(RuntimeName.DOCKER),
        injection(),
        name="n",
        image="img",
        traits=traits("nvidia"),
        blocked="--dry-run: stage the library tree ...",
    )
    assert s.emitted is not None and s.emitted.startswith("--dry-run")
    assert "docker run --rm" in s.shown


def test_case_no_runtime_names_what_was_probed() -> None:
    s = probe.step(door(None), injection(), name="n", image="img", traits=traits("amd"))
    assert s.emitted is not None and "probed: docker, nerdctl, ctr" in s.emitted
    assert s.argv[2:4] == ["docker", "run"]


def test_case_no_host_root_names_the_marker() -> None:
    d = probe.Door(None, None, no_host="/host carries no /etc, so it is not a node's root")
    s = probe.step(d, injection(), name="n", image="img", traits=traits("amd"))
    assert s.emitted is not None and "no host root to enter" in s.emitted and "/etc" in s.emitted
    assert s.argv[:2] == ["docker", "run"]


def test_case_ctr_is_rewritten_for_nerdctl_against_its_socket() -> None:
    s = probe.step(
        door(RuntimeName.CTR, nerdctl_absent=True), injection(), name="n", image="i", traits=traits("nvidia")
    )
    assert s.emitted is not None and "ctr never starts a probe" in s.emitted and "nerdctl is absent" in s.emitted
    assert s.argv[2:7] == [
        "nerdctl",
        "--address",
        "/run/k3s/containerd/containerd.sock",
        "--namespace",
        "gpustack-preflight",
    ]
    assert "--gpus" in s.argv


@pytest.mark.parametrize("runtime", [RuntimeName.NERDCTL, RuntimeName.CTR])
def test_case_ascend_without_a_door_is_rewritten_for_docker(runtime: RuntimeName) -> None:
    s = probe.step(door(runtime), injection(), name="n", image="i", traits=traits("ascend"))
    assert s.emitted is not None and "rewritten for docker with --runtime ascend" in s.emitted
    assert s.argv[2:4] == ["docker", "run"] and s.argv[s.argv.index("--runtime") + 1] == "ascend"
    assert "--namespace" not in s.argv and "--address" not in s.argv


def test_has_door_table() -> None:
    assert probe.has_door(traits("nvidia"), RuntimeName.DOCKER)
    assert probe.has_door(traits("nvidia"), RuntimeName.NERDCTL)
    assert not probe.has_door(traits("nvidia"), RuntimeName.CTR)
    assert probe.has_door(traits("ascend"), RuntimeName.DOCKER)
    assert not probe.has_door(traits("ascend"), RuntimeName.NERDCTL)
    assert probe.has_door(traits("amd"), RuntimeName.NERDCTL)
    assert not probe.has_door(traits("amd"), RuntimeName.CTR)


def group(manufacturer: str, **fields: object) -> DevicesGroup:
    return DevicesGroup.model_validate(
        {"id": "g", "name": "G", "manufacturer": manufacturer, "memory": 81559, **fields}
    )


def test_probe_images_per_family() -> None:
    assert probe.probe_image(traits("nvidia"), group("nvidia", runtimeVersion="12.4"), None).image == "nvidia/cuda:12"
    ascend = probe.probe_image(traits("ascend"), group("ascend", runtimeVersion="8.0.RC2", family="910B"), None)
    assert ascend.image == "quay.io/ascend/cann:8-910b"
    assert probe.probe_image(traits("amd"), group("amd"), None).image == "ubuntu:24.04"
    thead = probe.probe_image(traits("thead"), group("thead"), None)
    assert thead.image is None and thead.why_none is not None and "--probe-image" in thead.why_none
    hygon = probe.probe_image(traits("hygon"), group("hygon"), parse_image_ref("registry.local/dtk:25"))
    assert hygon.image == "registry.local/dtk:25"
    no_major = probe.probe_image(traits("nvidia"), group("nvidia"), None)
    assert no_major.image is None and no_major.why_none is not None


def test_names_are_the_accelerators_own_and_valid_container_names() -> None:
    assert probe.probe_name("ascend", "9B89C715 6E2EE224") == "gpustack-preflight-ascend-9B89C715-6E2EE224"
    assert probe.probe_name("nvidia", "GPU-1", "a") == "gpustack-preflight-nvidia-GPU-1-a"


OUTPUT = """\
gpustack-preflight-maps-begin
55d0c0a00000-55d0c0a02000 r--p 00000000 08:01 131 /usr/bin/cat
7f1e2c000000-7f1e2c001000 r-xp 00001000 00:2f 17 /usr/local/vgpu/libvgpu.so
7f1e2d000000-7f1e2d021000 rw-p 00000000 00:00 0 [heap]
gpustack-preflight-maps-end
gpustack-preflight-reader-begin
40779
gpustack-preflight-reader-end rc=0
"""


def test_evidence_is_parsed_from_the_markers() -> None:
    ev = probe.parse_evidence(OUTPUT)
    assert ev.maps == ["/usr/bin/cat", "/usr/local/vgpu/libvgpu.so"]
    assert ev.figures == [40779] and ev.reader_rc == 0
    shown = probe.maps_evidence(ev, ["/usr/local/vgpu/libvgpu.so"])
    assert shown.splitlines()[1].endswith("/usr/local/vgpu/libvgpu.so") and len(shown.splitlines()) == 3


def test_a_probe_that_never_got_to_its_reader_has_no_figures() -> None:
    ev = probe.parse_evidence(OUTPUT.split("gpustack-preflight-reader-begin", maxsplit=1)[0])
    assert ev.maps is not None and ev.figures is None
    assert probe.parse_evidence("docker: Error response from daemon").maps is None


def test_the_preload_file_names_the_libraries() -> None:
    files = {"/var/lib/gpustack/operator/preflight/render-1/u/_preload/main": "/usr/local/vgpu/libvgpu.so\n"}
    assert probe.preloaded(injection(), files.__getitem__) == ["/usr/local/vgpu/libvgpu.so"]
    assert probe.preloaded(Injection(), files.__getitem__) is None


@pytest.mark.hostile
@settings(max_examples=300)
@given(
    st.lists(
        st.sampled_from(
            ["0", "12", " abc", "/x", "-", "\n", "\r", "9" * 20, "7f00-7f01 r-xp 0 00:1 2 /lib/a.so\n"]
            + [m + "\n" for m in (probe.MAPS_BEGIN, probe.MAPS_END, probe.READER_BEGIN, probe.READER_END + " rc=1")]
        )
    ).map("".join)
)
def test_evidence_parser_never_raises_and_bounds_figures(text: str) -> None:
    ev = probe.parse_evidence(text)
    assert all(0 <= f < 10**12 for f in ev.figures or [])
    assert all(p.startswith("/") for p in ev.maps or [])
