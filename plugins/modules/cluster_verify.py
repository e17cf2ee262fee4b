#!/usr/bin/python
# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)


DOCUMENTATION = r"""
---
module: cluster_verify
short_description: Compare each node's host view with the cluster's view of it, and report the drift
version_added: "0.1.0"
description:
  - For each host given, takes the detection it registered from M(gpustack.accelerators.accelerator_facts)
    (the host's view) and reads, from the Kubernetes API server, the cluster's view of its node - the
    NodeFeature C(<node>-gpustack-device-manager) labels, the C(Devices) (C(worker.gpustack.ai)) spec groups
    and status, the Node's allocatable per resource, and the Device Manager Pods bound to the node.
  - Returns one line per difference an operator can act on, per node, such as
    "nvidia driver 550.54.15 on the host, 535.104.05 in the NodeFeature labels",
    "GPU-x (nvidia h100-80gb-hbm3) is on the host but not in Devices",
    "Devices advertises GPU-y (nvidia h100-80gb-hbm3) the host no longer has",
    "allocatable nvidia.com/gpu 8, the host has 7",
    "no device-manager pod (DaemonSet gpustack-operator-device-manager-nvidia) on a node with 8 nvidia accelerators".
  - A node is V(ok) (no difference), V(drift) (differences), or V(error) - not fully compared - its facts
    could not be had (the host failed or was unreachable) or are no detection document, or a part of the
    cluster could not be read (a difference of kind C(unread) naming it, never taken for absent; what
    could be read is still compared and listed).
  - Only reads the API server. With O(dest) it writes the report - C(verify-<timestamp>.yaml), C(.html) and
    C(.junit.xml), one testcase per host, a drifting node a failure whose message is its differences - on
    the machine it runs on; meant to run once on the controller (C(delegate_to=localhost), C(run_once)).
  - Needs the C(gpustack-operator) package (and its C(kubernetes) client) where it runs, like the other modules.
attributes:
  check_mode:
    support: full
    description: It only reads the cluster; the report (O(dest)) is this run's output, written in check mode too.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
  platform:
    support: full
    platforms: posix
    description: Runs where the API server can be reached from, usually the controller.
options:
  hosts:
    description: The inventory hosts, aligned with O(results).
    type: list
    elements: str
    required: true
  results:
    description:
      - Each host's registered M(gpustack.accelerators.accelerator_facts) result (aligned with O(hosts)), or
        null for a host that registered none. A failed or unreachable result makes that node V(error).
    type: list
    elements: raw
    required: true
  node_names:
    description: The Kubernetes node name of each host, by host; a host not named here (or named empty) is its own node name.
    type: dict
    default: {}
  kubeconfig:
    description:
      - The kubeconfig to reach the API server with. Unset - O(api_server), else the in-cluster service account,
        else C(KUBECONFIG), else C(~/.kube/config).
    type: path
  context:
    description: The kubeconfig context to use; unset uses its current context.
    type: str
  api_server:
    description: The API server URL (C(https://host:port)); overrides the kubeconfig's.
    type: str
  namespace:
    description: The namespace the Device Manager's NodeFeatures live in (its C(KUBERNETES_POD_NAMESPACE)).
    type: str
    default: gpustack-system
  timeout:
    description: Seconds for each read from the API server (four per node).
    type: float
    default: 10
  resource_names:
    description:
      - The exclusive resource name of a manufacturer whose nodes override it
        (C(GPUSTACK_<MANUFACTURER>_ACCELERATABLE_RESOURCE_NAME)), by manufacturer; others use the default
        (C(nvidia.com/gpu), C(amd.com/gpu), ...).
    type: dict
    default: {}
  dest:
    description: Directory the report is written to; unset writes none.
    type: path
author:
  - GPUStack operator team (@gpustack)
"""

EXAMPLES = r"""
- name: Detect on every node
  gpustack.accelerators.accelerator_facts:
  register: verify_facts_result

- name: Compare each node with the cluster's view of it, once, on the controller
  gpustack.accelerators.cluster_verify:
    hosts: "{{ ansible_play_hosts_all }}"
    results: "{{ ansible_play_hosts_all | map('extract', hostvars) | map(attribute='verify_facts_result', default=none) | list }}"
    kubeconfig: ~/.kube/config
    dest: reports
  register: verify_report
  delegate_to: localhost
  run_once: true

- name: Print each drifting node
  ansible.builtin.debug:
    msg: "{{ verify_report.console }}"
  run_once: true
"""

RETURN = r"""
nodes:
  description: One entry per host, worst first (V(error), V(drift), V(ok)).
  returned: success
  type: list
  elements: dict
  contains:
    host:
      description: The inventory host.
      type: str
    node:
      description: Its Kubernetes node name.
      type: str
    status:
      description: V(ok), V(drift) or V(error).
      type: str
    differences:
      description: Each difference as C(kind) (C(unread), C(absent), C(unmeasured), C(label), C(driver),
        C(accelerator), C(allocatable), C(device-manager)) and C(text), one line.
      type: list
      elements: dict
      returned: when the node drifts
      sample: [{kind: driver, text: "nvidia driver 550.54.15 on the host, 535.104.05 in the NodeFeature labels"}]
    error:
      description: Why the node was not (fully) compared.
      type: str
      returned: when the status is V(error)
summary:
  description: Node counts by status.
  returned: success
  type: dict
  sample: {nodes: 3, error: 0, drift: 1, ok: 2}
summary_line:
  description: The summary in one line.
  returned: success
  type: str
  sample: "cluster verify: 3 nodes, 2 ok, 1 drift, 0 error"
console:
  description: "One line per node that is not ok, as host, node, status and the first difference with how many more."
  sample: ["fallen-01 (node fallen-01): drift - Devices advertises GPU-y (nvidia l40s) the host no longer has (+2 more)"]
  returned: success
  type: list
  elements: str
failing:
  description: The console line of each host that is not ok, by host.
  returned: success
  type: dict
fail_message:
  description: The words each failing host fails with in the C(verify) role (the same for all, printed once).
  returned: success
  type: str
paths:
  description: The report files by kind (C(yaml), C(html), C(junit)).
  returned: when O(dest) is set
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpustack.accelerators.plugins.module_utils import verify_report
from ansible_collections.gpustack.accelerators.plugins.module_utils.gpustack import printable, require_gpustack


def facts_of(result):
    """The detection a registered result carries, or why there is none (one line)."""
    if result is None:
        return None, "no accelerator_facts result was registered for this host"
    if not isinstance(result, dict):
        return None, "its registered result is a %s, not an accelerator_facts result" % type(result).__name__
    if result.get("unreachable"):
        return None, "unreachable: %s" % printable(str(result.get("msg") or "unreachable"))
    if result.get("failed"):
        return None, "accelerator_facts failed: %s" % printable(str(result.get("msg") or "failed"))
    if result.get("skipped"):
        return None, "accelerator_facts was skipped on this host"
    facts = (result.get("ansible_facts") or {}).get("gpustack_accelerators")
    if facts is None:
        return None, "its registered result carries no gpustack_accelerators facts"
    return facts, None


def host_facts(result):
    """The detection a registered result carries as a checked document, or why it cannot be compared."""
    from gpustack_operator.verify import FactsError, host_view

    facts, why = facts_of(result)
    if why:
        return None, why
    try:
        host_view(facts)
    except FactsError as exc:
        return None, "the host facts are no detection document: %s" % exc
    return facts, None


def verify_one(host, node, facts, view, resource_names):
    """The report entry of one host whose facts are a detection document, against its node's view."""
    from gpustack_operator.verify import compare

    differences = [d.as_dict() for d in compare(facts, view, resource_names)]
    unread = [d["text"] for d in differences if d["kind"] == "unread"]
    if unread:  # not fully compared: an error, its differences kept (what could be read is still compared)
        return verify_report.entry(host, node, "error", differences, error=unread[0])
    return verify_report.entry(host, node, "drift" if differences else "ok", differences)


def verify_all(client, hosts, results, params):
    """Every host's report entry, in the hosts' order: the cluster's view is read only for the nodes of
    hosts whose facts can be compared, several nodes at a time (``read_cluster_views``)."""
    from gpustack_operator.kube.clusterview import read_cluster_views

    names = params["node_names"] or {}
    rows = []
    for host, result in zip(hosts, results):
        facts, why = host_facts(result)
        rows.append((host, str(names.get(host) or host), facts, why))
    wanted = [node for _host, node, _facts, why in rows if why is None]
    views = iter(read_cluster_views(client, wanted, namespace=params["namespace"], timeout=params["timeout"]))
    entries = []
    for host, node, facts, why in rows:
        if why is not None:
            entries.append(verify_report.entry(host, node, "error", error=why))
        else:
            entries.append(verify_one(host, node, facts, next(views), params["resource_names"]))
    return entries


def main():
    module = AnsibleModule(
        argument_spec=dict(
            hosts=dict(type="list", elements="str", required=True),
            results=dict(type="list", elements="raw", required=True),
            node_names=dict(type="dict", default={}),
            kubeconfig=dict(type="path"),
            context=dict(type="str"),
            api_server=dict(type="str"),
            namespace=dict(type="str", default="gpustack-system"),
            timeout=dict(type="float", default=10),
            resource_names=dict(type="dict", default={}),
            dest=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    hosts, results = params["hosts"], params["results"]
    if len(hosts) != len(results):
        module.fail_json(msg="hosts and results must align: %d hosts, %d results" % (len(hosts), len(results)))
    if not params["namespace"].strip():
        module.fail_json(msg="namespace is empty: name the namespace the Device Manager runs in (gpustack-system)")
    if params["timeout"] <= 0:
        module.fail_json(msg="timeout must be a positive number of seconds, not %s" % params["timeout"])
    dest = params["dest"]
    if dest is not None and (not dest.strip() or "\0" in dest):
        module.fail_json(msg="dest is empty: name the directory the verify report is written to")
    if dest and os.path.exists(dest) and not os.path.isdir(dest):
        module.fail_json(msg="dest %s exists and is not a directory" % dest)
    require_gpustack(module)
    from gpustack_operator.kube.clusterview import ClusterConfigError, make_client

    try:
        client = make_client(params["kubeconfig"], params["context"], params["api_server"])
    except ClusterConfigError as exc:
        module.fail_json(msg=str(exc))
    entries = verify_all(client, hosts, results, params)
    report = verify_report.build(entries)
    out = dict(
        changed=False,
        nodes=report["nodes"],
        summary=report["summary"],
        summary_line=verify_report.summary_line(report["summary"]),
        console=verify_report.console_lines(report),
        failing=verify_report.failing_hosts(report),
    )
    where = ""
    if dest:
        try:
            out["paths"] = verify_report.write(report, dest)
        except (ValueError, OSError) as exc:
            module.fail_json(msg="the verify report could not be written to %s: %s" % (dest, exc))
        where = " (%s)" % out["paths"]["html"]
    out["fail_message"] = (
        "cluster view differs from the host: this node's line is in the verify summary above%s" % where
    )
    module.exit_json(**out)


if __name__ == "__main__":
    main()
