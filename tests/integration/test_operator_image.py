"""The operator image (operator/Containerfile, built by tests/tools/operator_image.sh; docs/chart.md "The
image") carries what the worker's image mode runs (docs/worker.md "Image mode"): a working helm at
/usr/local/bin/helm and the packaged chart at the path worker/install.py looks for, which that helm
renders -- checked inside the image, with no network, as the image's own non-root user.

operator_image.sh tags the image by a hash of everything the build reads (the chart and the helm binary
included), so this reuses the image while that is unchanged (~2 s) and builds it again otherwise (~2-3
min on 2 cores; the build needs PyPI). Skips, with the reason, only where the image cannot be built
here: not root, no podman, no base image localhost/gpustack-molecule (tests/tools/podman_image.sh makes
it), or no helm (npm cannot fetch it: operator_image.sh exit 3).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from gpustack_operator import __version__
from gpustack_operator.worker.install import RELEASE, packaged_chart

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "tools" / "operator_image.sh"
CONTAINERS_CONF = REPO / "tests" / ".build" / "podman" / "containers.conf"
BASE = "localhost/gpustack-molecule"
BUILD_TIMEOUT = 1800.0
HELM_UNAVAILABLE = 3  # operator_image.sh's exit code when tests/tools/helm.sh cannot fetch helm
USER = "65532:65532"


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def cannot_build() -> str | None:
    if os.geteuid() != 0:
        return "the operator image is built with podman as root (tests/tools/operator_image.sh): not root"
    if shutil.which("podman") is None:
        return "podman is not installed (tests/tools/podman_image.sh installs it)"
    if not CONTAINERS_CONF.is_file():
        return f"no {CONTAINERS_CONF.relative_to(REPO)}: run tests/tools/podman_image.sh first"
    exists = subprocess.run(["podman", "image", "exists", BASE], env=podman_env(), capture_output=True, timeout=60)
    if exists.returncode != 0:
        return f"no base image {BASE}: run tests/tools/podman_image.sh first"
    return None


def provide_image() -> str:
    """The current image's name (built when its recipe is new), or a skip saying why it cannot be built
    here; a failed build is a failure with the script's output."""
    reason = cannot_build()
    if reason:
        pytest.skip(reason)
    proc = subprocess.run(
        ["bash", str(SCRIPT)], cwd=REPO, env=podman_env(), capture_output=True, text=True, timeout=BUILD_TIMEOUT
    )
    if proc.returncode == HELM_UNAVAILABLE:
        pytest.skip(f"helm is not available: {proc.stderr.strip()[-500:]}")
    assert proc.returncode == 0, f"tests/tools/operator_image.sh exit {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def image() -> str:
    return provide_image()


def run_in(image: str, *argv: str, entrypoint: str | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` in a throwaway container of ``image``: no network, read-only root, a tmpfs /tmp (as the
    chart's worker runs), the image's own user."""
    cmd = ["podman", "run", "--rm", "--network", "none", "--read-only", "--tmpfs", "/tmp", "--user", USER]
    if entrypoint:
        cmd += ["--entrypoint", entrypoint]
    proc = subprocess.run([*cmd, image, *argv], env=podman_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(argv)} in {image}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
    return proc


def test_the_image_runs_as_its_non_root_user(image: str) -> None:
    user = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Config.User}}", image],
        env=podman_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert user.stdout.strip() == USER


def test_helm_runs_in_the_image(image: str) -> None:
    out = run_in(image, "version", "--short", entrypoint="helm").stdout
    assert out.startswith("v4."), out


def test_the_worker_runs_in_the_image(image: str) -> None:
    out = run_in(image, "worker", "--help").stdout
    assert "--helm-binary" in out and "--disable-applications" in out, out


def test_the_packaged_chart_renders_in_the_image(image: str) -> None:
    """The chart at the path worker/install.py installs from, rendered by the image's helm with the
    values image mode uses (worker.enabled=false): the Device Manager's DaemonSets, no worker."""
    chart = str(packaged_chart({}))
    assert chart == f"/etc/gpustack/charts/gpustack-operator-{__version__}.tgz"
    values = ("--namespace", "gpustack-system", "--set", "worker.enabled=false")
    out = run_in(image, "template", RELEASE, chart, *values, entrypoint="helm").stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    kinds = {d["kind"] for d in docs}
    assert "DaemonSet" in kinds and "Deployment" not in kinds, sorted(kinds)
    daemonsets = [d for d in docs if d["kind"] == "DaemonSet"]
    images = {c["image"] for d in daemonsets for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {f"gpustack/gpustack-operator-py:{__version__}"}, images
    info = run_in(image, "show", "chart", chart, entrypoint="helm").stdout
    assert yaml.safe_load(info)["version"] == __version__
