"""The deploy role for real (issue 19): ``gpustack.accelerators.deploy`` run by ansible-playbook with
kubernetes.core 6.6.0 (tests/tools/kubernetes_core.py) and helm 4.1.4 (tests/tools/helm.sh) against the
one-node cluster (tests/tools/kube_cluster.py, Kubernetes 1.20.2), from this checkout's chart.

What it covers, in order (one module: each step starts from the state the previous one left):

1. NFD's CRDs absent and ``deploy_nfd`` false: refused, naming both CRDs; no release exists.
2. The minimal NFD CRDs created; ``--check``: reported as a change, and still no release.
3. ``atomic`` for real: a value the chart's schema takes but the API server refuses (the Device Manager's
   ``securityContext.runAsUser: -1``) -- so the install fails, helm rolls it back
   (``--rollback-on-failure``), the role fails with the server's words, and no release is left.
4. The deploy: the Device Manager off, the worker on with the cluster's local image (``localhost/pause:1``,
   never pulled -- there is no registry), ``deploy_wait: false`` and ``deploy_atomic: false`` (that image
   cannot run the worker, so its Pod never gets Ready and waiting -- which ``--atomic`` does too -- would
   only time out). The release ``gpustack-operator`` is
   deployed in ``gpustack-system``; the Devices CRD, the worker's ServiceAccount, ClusterRole(Binding),
   Role(Binding) and Deployment exist; no Device Manager object does.
5. A second run with the same variables: no change, the release still at revision 1.
6. ``--check`` with a different value (the image tag): reported as a change, and nothing changed
   (revision 1, the Deployment's image as before).
7. ``--check --diff`` with that value, no helm-diff plugin: the manifest_diff task shows the worker
   Deployment's image line changing and no other object; nothing changed. With the deployed values the
   diff finds no object changing.
8. ``playbooks/deploy.yml`` over the cluster's node (its root a fixture without accelerators, the
   preflight dry): preflight, the deploy (unchanged), verify (the node agrees: nothing on the host,
   nothing published).

Not covered here: ``--wait`` over workloads that become Ready, and the Device Manager's DaemonSets
running -- the end-to-end story with the operator image in the cluster is tests/cluster/test_end_to_end.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from gpustack_operator.kube.rest import KubeRequestError, request

from tests.cluster.test_publish_cluster import NODE_FEATURE_CRD, apply_crd, client_of
from tests.cluster.test_worker import RULE_CRD
from tests.conftest import BIN, REPO
from tests.tools.kube_cluster import KubeCluster

pytestmark = pytest.mark.ansible

RELEASE = "gpustack-operator"
NS = "gpustack-system"
CHART = REPO / "operator" / "chart" / "gpustack-operator"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NFD_CRDS = ("nodefeatures.nfd.k8s-sigs.io", "nodefeaturerules.nfd.k8s-sigs.io")
DM = "gpustack-operator-device-manager"
# what this cluster can take (module docstring): the worker on the local image, the Device Manager off
DEPLOYABLE: dict[str, Any] = {
    "deploy_device_manager_enabled": False,
    "deploy_image": {"repository": "localhost/pause", "tag": "1", "pullPolicy": "Never"},
    "deploy_wait": False,
    "deploy_atomic": False,  # helm's --atomic / --rollback-on-failure waits whatever --wait says
}
MANUFACTURERS = ("amd", "ascend", "cambricon", "hygon", "iluvatar", "metax", "mthreads", "nvidia", "thead")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("deploy")


def helm_env(work: Path) -> dict[str, str]:
    """helm's homes in the test's own directory: nothing of the user's is read or written."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSTACK_", "ANSIBLE_", "HELM_", "KUBECONFIG"))}
    for name in ("CACHE", "CONFIG", "DATA"):
        (work / f"helm-{name.lower()}").mkdir(exist_ok=True)
        env[f"HELM_{name}_HOME"] = str(work / f"helm-{name.lower()}")
    return env | {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def ansible_env(work: Path, collections: Path) -> dict[str, str]:
    """This checkout's ansible.cfg, kubernetes.core from the machine cache beside this collection."""
    (work / "home").mkdir(exist_ok=True)
    return helm_env(work) | {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": f"{collections}:{REPO / 'collections'}",
        "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "HOME": str(work / "home"),
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
    }


def run_role(
    cluster: KubeCluster,
    helm: Path,
    collections: Path,
    work: Path,
    *,
    check: bool = False,
    diff: bool = False,
    **variables: Any,
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook over a play on localhost running the role with the test's variables."""
    play = work / "deploy.yml"
    play.write_text(
        yaml.safe_dump(
            [{"hosts": "localhost", "gather_facts": False, "roles": [{"role": "gpustack.accelerators.deploy"}]}]
        )
    )
    inventory = work / "inventory.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": local}}}))
    extra = {
        "deploy_chart": str(CHART),
        "deploy_kubeconfig": str(cluster.kubeconfig),
        "deploy_helm_binary": str(helm),
        "deploy_timeout": "2m0s",
    } | variables
    (work / "vars.json").write_text(json.dumps(extra))
    env = ansible_env(work, collections)
    argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(play), "-e", f"@{work / 'vars.json'}"]
    flags = [*(["--check"] if check else []), *(["--diff"] if diff else [])]
    return subprocess.run([*argv, *flags], capture_output=True, text=True, env=env, timeout=300, check=False)


def recap(proc: subprocess.CompletedProcess[str]) -> dict[str, int]:
    return recap_of(proc, "localhost")


def recap_of(proc: subprocess.CompletedProcess[str], host: str) -> dict[str, int]:
    match = re.search(rf"^{re.escape(host)}\s+:\s+(.*)$", proc.stdout, re.MULTILINE)
    assert match, proc.stdout[-3000:] + proc.stderr[-2000:]
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", match[1])}


def releases(helm: Path, cluster: KubeCluster, work: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [str(helm), "list", "-n", NS, "-o", "json", "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        env=helm_env(work),
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    listed: list[dict[str, Any]] = json.loads(proc.stdout or "[]")
    return listed


def exists(client: kubernetes.client.ApiClient, path: str) -> bool:
    try:
        request(client, "GET", path)
    except KubeRequestError as exc:
        if exc.status == 404:
            return False
        raise
    return True


@pytest.fixture(scope="module")
def client(kube_cluster: KubeCluster, helm: Path, work: Path) -> Iterator[kubernetes.client.ApiClient]:
    """The cluster without NFD's CRDs (another test of the session may have made them) and without the
    release; the release is uninstalled afterwards (the CRDs the test made stay, as other tests' do)."""
    c = client_of(kube_cluster)
    for name in NFD_CRDS:
        try:
            request(c, "DELETE", f"{CRD_PATH}/{name}")
        except KubeRequestError as exc:
            assert exc.status == 404, exc
    deadline = time.monotonic() + 60
    while any(exists(c, f"{CRD_PATH}/{name}") for name in NFD_CRDS):
        assert time.monotonic() < deadline, "NFD's CRDs were not deleted within 60 s"
        time.sleep(0.5)
    assert not [r for r in releases(helm, kube_cluster, work) if r["name"] == RELEASE]
    yield c
    subprocess.run(
        [str(helm), "uninstall", RELEASE, "-n", NS, "--kubeconfig", str(kube_cluster.kubeconfig)],
        capture_output=True,
        env=helm_env(work),
        timeout=120,
        check=False,
    )


def image_of_the_worker(client: kubernetes.client.ApiClient) -> str:
    got = request(client, "GET", f"/apis/apps/v1/namespaces/{NS}/deployments/gpustack-operator-worker")
    image: str = got["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


def the_release(helm: Path, cluster: KubeCluster, work: Path) -> dict[str, Any] | None:
    found = [r for r in releases(helm, cluster, work) if r["name"] == RELEASE]
    return found[0] if found else None


def test_refused_without_nfd_crds_and_the_subchart_off(
    kube_cluster: KubeCluster, client: kubernetes.client.ApiClient, helm: Path, collections: Path, work: Path
) -> None:
    proc = run_role(kube_cluster, helm, collections, work)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert (
        "Node Feature Discovery's CRDs nodefeatures.nfd.k8s-sigs.io and nodefeaturerules.nfd.k8s-sigs.io are absent"
        in out
    ), out[-3000:]
    assert "Nothing was installed" in out
    assert the_release(helm, kube_cluster, work) is None


def test_check_mode_installs_nothing(
    kube_cluster: KubeCluster, client: kubernetes.client.ApiClient, helm: Path, collections: Path, work: Path
) -> None:
    apply_crd(client, NODE_FEATURE_CRD)
    apply_crd(client, RULE_CRD)
    proc = run_role(kube_cluster, helm, collections, work, check=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert recap(proc)["changed"] == 1, proc.stdout[-3000:]
    assert "would be installed or upgraded" in proc.stdout
    assert the_release(helm, kube_cluster, work) is None


def test_a_failed_install_is_rolled_back(
    kube_cluster: KubeCluster, client: kubernetes.client.ApiClient, helm: Path, collections: Path, work: Path
) -> None:
    refused = {"deviceManager": {"securityContext": {"privileged": True, "runAsUser": -1}}}
    proc = run_role(kube_cluster, helm, collections, work, deploy_wait=False, deploy_values=refused)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "has been uninstalled due to rollback-on-failure being set" in out, out[-3000:]
    assert "runAsUser: Invalid value: -1" in out, out[-3000:]
    assert the_release(helm, kube_cluster, work) is None
    assert not exists(client, f"/apis/apps/v1/namespaces/{NS}/daemonsets/gpustack-operator-device-manager-nvidia")


def test_deploy_installs_the_release_rbac_and_crds(
    kube_cluster: KubeCluster, client: kubernetes.client.ApiClient, helm: Path, collections: Path, work: Path
) -> None:
    proc = run_role(kube_cluster, helm, collections, work, **DEPLOYABLE)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert recap(proc)["changed"] == 1, proc.stdout[-3000:]
    release = the_release(helm, kube_cluster, work)
    assert release is not None and release["status"] == "deployed" and release["revision"] == "1", release
    assert release["chart"] == "gpustack-operator-0.1.0", release
    worker = "gpustack-operator-worker"
    for path in (
        f"{CRD_PATH}/devices.worker.gpustack.ai",
        f"/api/v1/namespaces/{NS}/serviceaccounts/{worker}",
        f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{worker}",
        f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{worker}",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles/{worker}",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings/{worker}",
        f"/apis/apps/v1/namespaces/{NS}/deployments/{worker}",
    ):
        assert exists(client, path), path
    assert image_of_the_worker(client) == "localhost/pause:1"
    # the Device Manager was deployed off: none of its objects
    for path in (
        f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{DM}",
        f"/api/v1/namespaces/{NS}/serviceaccounts/{DM}",
        *(f"/apis/apps/v1/namespaces/{NS}/daemonsets/{DM}-{m}" for m in MANUFACTURERS),
    ):
        assert not exists(client, path), path


def test_second_run_is_unchanged(
    kube_cluster: KubeCluster, client: kubernetes.client.ApiClient, helm: Path, collections: Path, work: Path
) -> None:
    proc = run_role(kube_cluster, helm, collections, work, **DEPLOYABLE)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert recap(proc)["changed"] == 0, proc.stdout[-3000:]
    assert "unchanged, revision 1 deployed" in proc.stdout, proc.stdout[-3000:]
    release = the_release(helm, kube_cluster, work)
    assert release is not None and release["revision"] == "1", release


def test_check_mode_with_a_change_changes_nothing(
    kube_cluster: KubeCluster, client: kubernetes.client.ApiClient, helm: Path, collections: Path, work: Path
) -> None:
    changed = DEPLOYABLE | {"deploy_image": {"repository": "localhost/pause", "tag": "2", "pullPolicy": "Never"}}
    proc = run_role(kube_cluster, helm, collections, work, check=True, **changed)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert recap(proc)["changed"] == 1, proc.stdout[-3000:]
    assert "would be installed or upgraded" in proc.stdout
    release = the_release(helm, kube_cluster, work)
    assert release is not None and release["revision"] == "1", release
    assert image_of_the_worker(client) == "localhost/pause:1"


def test_check_and_diff_show_the_image_change_and_change_nothing(
    kube_cluster: KubeCluster, client: kubernetes.client.ApiClient, helm: Path, collections: Path, work: Path
) -> None:
    """``--check --diff`` without the helm-diff plugin (helm's plugin directory is the test's own, empty):
    manifest_diff shows the worker Deployment's image line changing and no other object; nothing changes."""
    assert not any((work / "helm-data").glob("plugins/*")), "a helm plugin is installed: this test is about none"
    changed = DEPLOYABLE | {"deploy_image": {"repository": "localhost/pause", "tag": "2", "pullPolicy": "Never"}}
    proc = run_role(kube_cluster, helm, collections, work, check=True, diff=True, **changed)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    # the release task (would change) and the diff task (the manifests differ) -- the render is not a change
    assert recap(proc)["changed"] == 2, proc.stdout[-4000:]
    assert "would be installed or upgraded" in proc.stdout
    assert "--- before: release gpustack-operator in gpustack-system: revision 1 (deployed)" in proc.stdout, out[-5000:]
    assert "+++ after: release gpustack-operator in gpustack-system: rendered from gpustack-operator" in proc.stdout
    changed_lines = re.findall(r"^[-+] .*$", proc.stdout, re.MULTILINE)
    assert changed_lines == ["-        image: localhost/pause:1", "+        image: localhost/pause:2"], out[-5000:]
    assert (
        "release gpustack-operator in gpustack-system: 1 changed (Deployment gpustack-system/gpustack-operator-worker)"
        in proc.stdout
    ), proc.stdout[-4000:]
    release = the_release(helm, kube_cluster, work)
    assert release is not None and release["revision"] == "1", release
    assert image_of_the_worker(client) == "localhost/pause:1"


def test_diff_of_the_same_values_shows_nothing(
    kube_cluster: KubeCluster, client: kubernetes.client.ApiClient, helm: Path, collections: Path, work: Path
) -> None:
    """``--check --diff`` with the deployed values: every object of the render equals the release's (the
    RuntimeClasses included: none existed before the release, so its own render kept them), no change."""
    proc = run_role(kube_cluster, helm, collections, work, check=True, diff=True, **DEPLOYABLE)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert recap(proc)["changed"] == 0, proc.stdout[-4000:]
    assert re.search(
        r"release gpustack-operator in gpustack-system: no object would change \(\d+ unchanged\)", proc.stdout
    )
    assert "--- before:" not in proc.stdout
    release = the_release(helm, kube_cluster, work)
    assert release is not None and release["revision"] == "1", release


def test_the_deploy_playbook_preflights_deploys_and_verifies(
    kube_cluster: KubeCluster, client: kubernetes.client.ApiClient, helm: Path, collections: Path, work: Path
) -> None:
    """playbooks/deploy.yml over one host -- the cluster's node, its root a fixture without accelerators
    (the preflight dry: nothing written into the fixture) -- finds the release as the steps above left it
    (unchanged, from this checkout's chart) and verifies the node: nothing on the host, nothing published."""
    inventory = work / "fleet.yml"
    node = {"gpustack_host_root": str(REPO / "tests/fixtures/hosts/cpu-only-vm"), "gpustack_manufacturers": ["nvidia"]}
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    inventory.write_text(yaml.safe_dump({"all": {"vars": local, "hosts": {kube_cluster.node_name: node}}}))
    extra = DEPLOYABLE | {
        "deploy_kubeconfig": str(kube_cluster.kubeconfig),
        "deploy_helm_binary": str(helm),
        "verify_kubeconfig": str(kube_cluster.kubeconfig),
        "verify_report_dir": str(work / "reports"),
        "preflight_report_dir": str(work / "reports"),
        "preflight_dry_run": True,
        "preflight_fail_on": "never",
    }
    (work / "fleet-vars.json").write_text(json.dumps(extra))
    env = ansible_env(work, collections)
    argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(REPO / "playbooks/deploy.yml")]
    proc = subprocess.run(
        [*argv, "-e", f"@{work / 'fleet-vars.json'}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert "Preflight every accelerator node" in out and "Does the cluster see what the hosts have?" in out
    assert "release gpustack-operator in gpustack-system: unchanged, revision 1 deployed" in out, out[-4000:]
    assert re.search(r"cluster verify: 1 nodes?, 1 ok, 0 drift, 0 error", out), out[-4000:]
    assert recap_of(proc, kube_cluster.node_name)["failed"] == 0
    assert sorted(p.suffix for p in (work / "reports").glob("verify-*")) == [".html", ".xml", ".yaml"]
