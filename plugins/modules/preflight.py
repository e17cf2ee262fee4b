#!/usr/bin/python
# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)


DOCUMENTATION = r"""
---
module: preflight
short_description: Run the GPUStack accelerator preflight on a host
version_added: "0.1.0"
description:
  - Runs C(gpustack-operator device-manager preflight) on the target and returns its report.
  - Every manufacturer asked about gets a detection answer C(ok), C(unavailable) or
    C(not-declared) with the depth it was reached at.
  - The report also carries the C(network) section (RDMA links) and the C(topology) section (the
    kubelet's TopologyManager policy, or C(unknown) with a note saying why); neither affects the verdict.
  - The container runtime preflight would drive is resolved from the kubelet's own CRI endpoint
    (running kubelet's command line, its C(--config) file and C(--config-dir) drop-ins; with no kubelet
    running C(/var/lib/kubelet/kubeadm-flags.env), C(/var/lib/kubelet/config.yaml), the distribution's
    C(kubelet.conf.d) tree), else probed C(docker), C(nerdctl), C(ctr); O(runtime) overrides it.
    It is returned as RV(runtime).
  - The task fails only when an answer is C(unavailable) (the exit-code rule of the preflight);
    C(msg) then names every unavailable answer and its reason. The report is returned either way.
options:
  runtime:
    description:
      - The container CLI preflight's container steps drive, instead of the one resolved from the kubelet.
      - A runtime the host does not carry is accepted; RV(runtime.emitted) then says every container step
        would be emitted instead of run.
    type: str
    choices: [docker, nerdctl, ctr]
  probe_image:
    description:
      - Image for the probe containers, an OCI image reference
        C([registry[:port]/]path[:tag][@sha256:<64 hex>]) such as C(ubuntu:24.04); for air-gapped use.
      - Validated before the pass (a malformed reference fails the task naming the problem) and returned as
        RV(probe_image). Without it each family's default is used (C(nvidia/cuda:<CUDA major>),
        C(quay.io/ascend/cann:<CANN major>-<family>), C(ubuntu:24.04) for AMD); Hygon and T-Head claim no
        default, so their slice rows stop at C(simulated) without one.
    type: str
  capabilities:
    description:
      - Also answer questions 2 and 3 (can the accelerators be sliced, can they be managed while sliced) -
        the driver-read rows, the allocator's own injection for a synthetic slice, and the probe containers
        with the lock, the stale-container sweep and the preload-library staging around them.
      - Writes to the host unless O(dry_run) (or check mode) - the staged library tree (kept), the
        responder's rendered files (removed at the end), the lock file (kept), a driver mode asked on and
        put straight back.
      - V(false) answers question 1 only (detection), writing nothing.
    type: bool
    default: true
  preload_source:
    description:
      - The preload-library tree staged onto the host (a directory or tarball on the target, read in the
        module's own filesystem). Defaults to C(/opt/gpustack/lib) of the node view (O(detect_root)), where the
        operator image carries it.
    type: path
  detect_root:
    description:
      - The node view the detect pass reads as its own (its C(/sys), C(/dev) and vendor libraries), when
        it is not O(host_root) -- e.g. a captured container view replayed against its host.
      - Defaults to O(host_root), since on the node itself the two contexts are one root. When set,
        O(host_root) is only entered for the host's own vendor CLI and read for the kubelet's configuration.
      - Defaults to the host's C(gpustack_detect_root) inventory variable when set. An empty or blank value
        is refused.
    type: path
  dry_run:
    description:
      - Print container steps instead of taking them; write nothing to the host.
      - Forced on in check mode (RV(dry_run) is then V(true)).
    type: bool
    default: false
  fail_on:
    description:
      - C(unavailable) fails the task when an answer is C(unavailable) (the preflight's exit-code rule);
        C(never) always succeeds and leaves the verdict to RV(failures) and RV(summary).
    type: str
    choices: [unavailable, never]
    default: unavailable
extends_documentation_fragment:
  - gpustack.accelerators.node
  - gpustack.accelerators.node.manufacturers
attributes:
  check_mode:
    support: full
    description: Runs as a dry run; nothing is written to the host.
  diff_mode:
    support: none
    description: Nothing on the host changes, so there is nothing to diff.
  platform:
    support: full
    platforms: posix
    description: Linux nodes (reads sysfs and /proc through the host root).
author:
  - GPUStack operator team (@gpustack)
"""

EXAMPLES = r"""
- name: Preflight every manufacturer
  gpustack.accelerators.preflight:
  register: preflight

- name: Preflight NVIDIA only, without touching the node
  gpustack.accelerators.preflight:
    manufacturers: [nvidia]
    dry_run: true

- name: Preflight every manufacturer but T-Head
  gpustack.accelerators.preflight:
    manufacturers: ["!thead"]

- name: Drive nerdctl and a mirrored probe image whatever the kubelet says
  gpustack.accelerators.preflight:
    runtime: nerdctl
    probe_image: registry.example.com:5000/mirror/ubuntu:24.04

- name: Keep going on an unavailable answer and inspect it
  gpustack.accelerators.preflight:
    fail_on: never
  register: preflight

- name: Show the compact answers
  ansible.builtin.debug:
    msg: "{{ preflight.summary }}"

- name: Say which runtime container steps would use
  ansible.builtin.debug:
    msg: "{{ preflight.runtime.runtime | default('none', true) }} ({{ preflight.runtime.reason | default('resolved') }})"
"""

RETURN = r"""
report:
  description:
    - The whole preflight document, as C(gpustack-operator dm preflight) prints it.
    - Sections C(accelerators) (one group per manufacturer), C(network) and C(topology).
  returned: always
  type: dict
  sample:
    accelerators:
      - manufacturer: nvidia
        timestamp: "2026-11-29T10:00:00Z"
        detection:
          state: ok
          depth: declared
          accelerators: 8
          detail: NVIDIA H100 80GB HBM3 x8
        note: only question 1 (detection) is answered by this version
    network:
      timestamp: "2026-11-29T10:00:00Z"
      note: no RDMA hardware
    topology:
      timestamp: "2026-11-29T10:00:00Z"
      policy: single-numa-node
      depth: declared
summary:
  description: The compact reading of RV(report) and RV(runtime).
  returned: always
  type: dict
  contains:
    manufacturers:
      description: Per manufacturer, its detection C(state), C(depth) and number of C(accelerators).
      returned: always
      type: dict
      sample:
        nvidia: {state: ok, depth: declared, accelerators: 8}
        amd: {state: not-declared, depth: declared, accelerators: 0}
    states:
      description: How many manufacturers are in each state (C(ok), C(unavailable), C(not-declared)).
      returned: always
      type: dict
      sample: {ok: 1, unavailable: 0, not-declared: 8}
    topology:
      description: The kubelet's TopologyManager policy, or C(unknown) (see RV(report) for the note).
      returned: always
      type: str
      sample: single-numa-node
    runtime:
      description: The container CLI resolved (C(docker), C(nerdctl) or C(ctr)); V(null) when none could be.
      returned: always
      type: str
      sample: nerdctl
runtime:
  description: How the container runtime was resolved.
  returned: always
  type: dict
  contains:
    runtime:
      description: C(docker), C(nerdctl) or C(ctr); absent when nothing could be driven (then RV(runtime.reason) says why).
      returned: when resolved
      type: str
      sample: nerdctl
    source:
      description: What decided it, C(--runtime) (the O(runtime) option), C(probe), or the kubelet flag or file that names the endpoint.
      returned: when known
      type: str
      sample: containerRuntimeEndpoint in /var/lib/kubelet/config.yaml
    endpoint:
      description: The kubelet's CRI endpoint, as stated.
      returned: when the kubelet states one
      type: str
      sample: unix:///run/containerd/containerd.sock
    binary:
      description: Where the host carries the CLI.
      returned: when the host carries it
      type: str
      sample: /usr/local/bin/nerdctl
    socket:
      description: The containerd socket a nerdctl or ctr step is pointed at.
      returned: for nerdctl and ctr, when known
      type: str
      sample: /run/containerd/containerd.sock
    namespace:
      description: The containerd namespace preflight's containers go in.
      returned: for nerdctl and ctr
      type: str
      sample: gpustack-preflight
    nerdctl_absent:
      description: The host carries no nerdctl (a ctr step is printed as a nerdctl command).
      returned: always
      type: bool
    probed:
      description: The CLIs looked for, in order.
      returned: when probing happened
      type: list
      elements: str
    emitted:
      description: Every container step would be emitted instead of run.
      returned: always
      type: bool
    reason:
      description: Why no runtime could be driven, or why its steps would be emitted.
      returned: when emitted
      type: str
dry_run:
  description: Whether this was a dry run (always V(true) in check mode).
  returned: always
  type: bool
  sample: false
probe_image:
  description: The validated O(probe_image), as given.
  returned: when O(probe_image) is set
  type: str
  sample: ubuntu:24.04
failures:
  description: Every unavailable answer, in words; non-empty exactly when the task failed (with O(fail_on=unavailable)).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpustack.accelerators.plugins.module_utils.gpustack import (
    COMMON_ARGS,
    gpustack_api,
    make_request,
    require_gpustack,
)

RUNTIMES = ["docker", "nerdctl", "ctr"]


def main():
    argument_spec = dict(COMMON_ARGS)
    argument_spec["dry_run"] = dict(type="bool", default=False)
    argument_spec["fail_on"] = dict(type="str", choices=["unavailable", "never"], default="unavailable")
    argument_spec["runtime"] = dict(type="str", choices=RUNTIMES)
    argument_spec["probe_image"] = dict(type="str")
    argument_spec["detect_root"] = dict(type="path")
    argument_spec["capabilities"] = dict(type="bool", default=True)
    argument_spec["preload_source"] = dict(type="path")
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    require_gpustack(module)
    req = make_request(module, root_option="detect_root")
    host_root = module.params["host_root"] or gpustack_api.default_host_root()
    dry_run = bool(module.params["dry_run"] or module.check_mode)
    try:
        report = gpustack_api.run_preflight(
            req,
            dry_run=dry_run,
            runtime=module.params["runtime"],
            probe_image=module.params["probe_image"],
            host_root=host_root,
            capabilities=module.params["capabilities"],
            preload_source=module.params["preload_source"],
        )
    except ValueError as exc:  # a probe image that is no image reference (runtime choices are Ansible's)
        module.fail_json(msg="preflight: %s" % exc)
    failures = report.failures()
    result = dict(
        changed=False,
        report=report.wire(),
        summary=report.summary(),
        runtime=report.runtime.model_dump(mode="json", exclude_none=True) if report.runtime else {},
        dry_run=dry_run,
        failures=failures,
    )
    if report.probe_image is not None:
        result["probe_image"] = report.probe_image
    if failures and module.params["fail_on"] == "unavailable":
        module.fail_json(msg="preflight: " + "; ".join(failures), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
