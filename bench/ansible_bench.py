"""Ansible-side benchmarks. Run: python bench/ansible_bench.py [--runs 5] [--hosts 200] [-f 10].

Prints numbers and ratios against baselines measured in the same run; asserts nothing.

(a) ``gpustack.accelerators.accelerator_facts`` vs ``ansible.builtin.setup`` on the same fixture host
    through ansible-runner (``connection: local``): median of ``--runs`` runs each, alternated so
    machine noise hits both alike; the ratio of the task durations (ansible-runner's own
    ``runner_on_ok`` duration) and of the whole ``ansible_runner.run`` calls. Target: facts <= 0.5x setup.
    ``ansible.builtin.ping`` runs alongside as the floor any module task pays, and the ratio of the work
    above that floor is printed too.
(b) a simulated fleet of ``--hosts`` hosts (``connection: local``, pointed round-robin at the
    simulated fleet's fixture hosts): wall time of ``ansible-playbook playbooks/preflight.yml -f N``
    vs ``ansible all -m ping -f N`` on the same inventory, both in this run. Target: fleet <= 1.5x ping
    (FLEET_TARGET); the verdict line says ``met`` or ``NOT met`` with the ratio. A timeline callback
    splits the playbook into its tasks (per-host preflight vs the one fleet report). With ``--floor``, a
    third run in the same loop: the same role and playbook with the preflight module swapped for a
    stand-in that only returns the host's own result, saved beforehand (no package import, no pass) --
    what the playbook costs around the pass, the floor no preflight module can go under.
(c) where a module's time goes: interpreter start, imports, one pass -- cold, in a fresh process per
    fleet fixture as each host pays it, and warm in process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import ansible_runner
import yaml
from gpustack_operator import api

REPO = Path(__file__).resolve().parent.parent
HOSTS = REPO / "tests" / "fixtures" / "hosts"
BIN = Path(sys.executable).parent
# the node shapes of examples/simulated-fleet (one of them cannot be read: unavailable answers)
FLEET_FIXTURES = [
    "h100-sxm-8x",
    "mixed-nvidia-mellanox",
    "a100-mig",
    "rtx4090",
    "nvidia-driver-broken",
    "mi300x-8x",
    "ascend-910b-8x",
    "ascend-950pr-v2",
    "mlu370-x8",
    "mixed-cambricon-metax",
    "hygon-k100",
    "metax-c500",
    "iluvatar-bi150",
    "mthreads-s4000",
    "thead-ppu",
    "cpu-only-vm",
    "hygon-cpu-only",
    "ampere-altra-cpu-only",
    "unreadable-sysfs",
]
FACTS_HOST = "h100-sxm-8x"
FLEET_TARGET = 1.5  # the whole playbook (every task, the fleet report included) against ping

TIMELINE_CALLBACK = """
import json, os, time
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "gpa_bench_timeline"
    CALLBACK_NEEDS_ENABLED = True

    def _log(self, event, host, task):
        with open(os.environ["GPA_TIMELINE"], "a") as out:
            out.write(json.dumps({"e": event, "h": host.get_name(), "task": task.get_name(), "t": time.time()}) + "\\n")

    def v2_runner_on_start(self, host, task):
        self._log("start", host, task)

    def v2_runner_on_ok(self, result):
        self._log("end", result._host, result._task)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._log("end", result._host, result._task)

    def v2_runner_on_unreachable(self, result):
        self._log("end", result._host, result._task)

    def v2_runner_on_skipped(self, result):
        self._log("end", result._host, result._task)
"""


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def fmt(seconds: float) -> str:
    return f"{seconds * 1000:8.0f} ms" if seconds < 10 else f"{seconds:8.1f} s "


def ansible_env(work: Path) -> dict[str, str]:
    """Every run with a bytecode cache, as an installed package has one (the install role's venv, a
    wheel compiled at install): ``PYTHONDONTWRITEBYTECODE`` dropped, ``PYTHONPYCACHEPREFIX`` in the
    work directory (the tree is never written), warmed by uncounted runs. Without it, a module whose
    source changed since the tree's last cache compiles it again on every host. Ad hoc ``ansible``
    loads the timeline callback too (``ANSIBLE_LOAD_CALLBACK_PLUGINS``): both runs pay for it."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPUSTACK_", "ANSIBLE_")) and k != "PYTHONDONTWRITEBYTECODE"
    }
    plugins = work / "callback_plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    (plugins / "gpa_bench_timeline.py").write_text(TIMELINE_CALLBACK)
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_LOCAL_TEMP=str(work / "ansible-tmp"),
        ANSIBLE_REMOTE_TEMP=str(work / "ansible-tmp"),
        ANSIBLE_CALLBACK_PLUGINS=str(plugins),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        PYTHONPYCACHEPREFIX=str(work / "pycache"),
        PATH=f"{BIN}:{env.get('PATH', '')}",
    )
    return env


# --- (a) facts vs setup ----------------------------------------------------------------------------


def runner_once(work: Path, inventory: Path, module: str) -> tuple[float, float]:
    """(whole ansible_runner.run wall time, the task's own duration) for one ad hoc module run."""
    private = Path(tempfile.mkdtemp(dir=work, prefix="runner-"))
    start = time.perf_counter()
    result = ansible_runner.run(
        private_data_dir=str(private),
        host_pattern="bench-node",
        inventory=str(inventory),
        module=module,
        quiet=True,
    )
    wall = time.perf_counter() - start
    oks = [e for e in result.events if e.get("event") == "runner_on_ok"]
    if result.rc != 0 or len(oks) != 1:
        raise RuntimeError(f"{module} failed (rc {result.rc}): {result.stdout.read()[-2000:]}")
    return wall, float(oks[0]["event_data"]["duration"])


def facts_vs_setup(work: Path, runs: int) -> None:
    inventory = work / "one-host.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "bench-node": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "gpustack_host_root": str(HOSTS / FACTS_HOST),
                        }
                    }
                }
            }
        )
    )
    # ping: the floor every module task pays here (worker fork, AnsiballZ, interpreter start, basic)
    modules = {
        "facts": "gpustack.accelerators.accelerator_facts",
        "setup": "ansible.builtin.setup",
        "ping": "ansible.builtin.ping",
    }
    walls: dict[str, list[float]] = {k: [] for k in modules}
    tasks: dict[str, list[float]] = {k: [] for k in modules}
    for module in modules.values():  # warm-up (page cache, .pyc): not counted
        runner_once(work, inventory, module)
    for _ in range(runs):
        for key, module in modules.items():
            wall, task = runner_once(work, inventory, module)
            walls[key].append(wall)
            tasks[key].append(task)
    print(f"== (a) accelerator_facts vs setup on {FACTS_HOST} via ansible-runner (median of {runs}, alternated)")
    for key, module in modules.items():
        print(f"  {module:<40} task {fmt(median(tasks[key]))}   ansible_runner.run {fmt(median(walls[key]))}")
    task_ratio = median(tasks["facts"]) / median(tasks["setup"])
    wall_ratio = median(walls["facts"]) / median(walls["setup"])
    verdict = "met" if task_ratio <= 0.5 else "NOT met"
    print(f"  ratio facts/setup: task {task_ratio:5.2f}x   whole run {wall_ratio:5.2f}x   (target <= 0.50x: {verdict})")
    floor = median(tasks["ping"])
    own = (median(tasks["facts"]) - floor) / max(median(tasks["setup"]) - floor, 1e-9)
    print(
        f"  the floor: ping's task is {floor / median(tasks['setup']):4.2f}x setup's; above it, facts' own work is"
        f" {own:4.2f}x setup's ((facts - ping) / (setup - ping))"
    )


# --- (b) fleet vs ping -----------------------------------------------------------------------------


def fleet_inventory(path: Path, hosts: int) -> Path:
    members = {
        f"node-{i:03d}": {"gpustack_host_root": str(HOSTS / FLEET_FIXTURES[i % len(FLEET_FIXTURES)])}
        for i in range(hosts)
    }
    path.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                    "hosts": members,
                }
            }
        )
    )
    return path


def children_cpu() -> float:
    """CPU seconds (user + system) of every waited-for descendant so far: a run's workers and module
    processes included, since each parent waits for its own."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: list[str], env: dict[str, str], timeline: Path) -> tuple[float, float, int, list[dict[str, object]]]:
    """(wall seconds, CPU seconds of the run's processes, exit code, timeline events) of one run."""
    timeline.unlink(missing_ok=True)
    run_env = {**env, "GPA_TIMELINE": str(timeline), "ANSIBLE_CALLBACKS_ENABLED": "gpa_bench_timeline"}
    cpu = children_cpu()
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=run_env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    events = [json.loads(line) for line in timeline.read_text().splitlines()] if timeline.exists() else []
    return wall, children_cpu() - cpu, proc.returncode, events


def phases(events: list[dict[str, object]]) -> dict[str, tuple[float, int]]:
    """Per task: (first start -> last end, hosts)."""
    spans: dict[str, list[float]] = {}
    hosts: dict[str, set[str]] = {}
    for e in events:
        task = str(e["task"])
        t = float(e["t"])  # type: ignore[arg-type]
        span = spans.setdefault(task, [t, t])
        span[0], span[1] = min(span[0], t), max(span[1], t)
        hosts.setdefault(task, set()).add(str(e["h"]))
    return {task: (span[1] - span[0], len(hosts[task])) for task, span in spans.items()}


def fleet_commands(work: Path, inventory: Path, forks: int) -> dict[str, list[str]]:
    """The two runs compared: ``ansible all -m ping`` and the whole preflight playbook."""
    playbook = [
        str(BIN / "ansible-playbook"),
        str(REPO / "playbooks" / "preflight.yml"),
        "-i",
        str(inventory),
        "-f",
        str(forks),
        "-e",
        f"preflight_report_dir={work / 'reports'}",
        "-e",
        "preflight_fail_on=never",
    ]
    ping = [str(BIN / "ansible"), "all", "-i", str(inventory), "-m", "ansible.builtin.ping", "-f", str(forks)]
    return {"ping": ping, "fleet": playbook}


# The floor's stand-in for the preflight module: the module's own options, the host's saved result.
FLOOR_MODULE = """#!/usr/bin/python
import json, os
from ansible.module_utils.basic import AnsibleModule
def main():
    module = AnsibleModule(argument_spec=dict(
        host_root=dict(type="path"), manufacturers=dict(type="list", elements="str"),
        dry_run=dict(type="bool", default=False), fail_on=dict(type="str", default="unavailable"),
        runtime=dict(type="str"), probe_image=dict(type="str"), detect_root=dict(type="path"),
        capabilities=dict(type="bool", default=True), preload_source=dict(type="path"),
        saved=dict(type="path", required=True)), supports_check_mode=True)
    name = os.path.basename(module.params["host_root"].rstrip("/")) + ".json"
    with open(os.path.join(module.params["saved"], name)) as handle:
        module.exit_json(**json.load(handle))
main()
"""

# One host's preflight result, as the module returns it, saved for the floor's stand-in.
SAVE_RESULT = """
import json, sys
from ansible_collections.gpustack.accelerators.plugins.module_utils import gpustack
api = gpustack.gpustack_api
root = sys.argv[1]
report = api.run_preflight(api.make_request(root, None), host_root=root)
runtime = report.runtime.model_dump(mode="json", exclude_none=True) if report.runtime else {}
result = dict(changed=False, report=report.wire(), summary=report.summary(), runtime=runtime, dry_run=False,
              failures=report.failures())
with open(sys.argv[2], "w") as out:
    json.dump(result, out)
"""


def floor_playbook(work: Path, env: dict[str, str]) -> Path:
    """The preflight playbook and role with the module swapped for :data:`FLOOR_MODULE`, and the saved
    result of every fixture it returns."""
    floor = work / "floor"
    saved = floor / "saved"
    saved.mkdir(parents=True, exist_ok=True)
    child_env = {**env, "PYTHONPATH": str(REPO / "collections")}
    for fixture in FLEET_FIXTURES:
        cmd = [sys.executable, "-c", SAVE_RESULT, str(HOSTS / fixture), str(saved / f"{fixture}.json")]
        subprocess.run(cmd, capture_output=True, env=child_env, check=True)
    (floor / "library").mkdir(exist_ok=True)
    (floor / "library" / "gpa_floor_preflight.py").write_text(FLOOR_MODULE)
    role = floor / "roles" / "floor_preflight"
    shutil.copytree(REPO / "roles" / "preflight", role, dirs_exist_ok=True)
    tasks = role / "tasks" / "main.yml"
    text = tasks.read_text()
    module = "  gpustack.accelerators.preflight:\n"
    assert text.count(module) == 1, "the role's preflight task moved: update the floor's stand-in"
    text = text.replace(
        module, f'  gpa_floor_preflight:\n    saved: {saved}\n    host_root: "{{{{ gpustack_host_root }}}}"\n'
    )
    tasks.write_text(text)
    play = yaml.safe_load((REPO / "playbooks" / "preflight.yml").read_text())
    play[0]["roles"] = [{"role": "floor_preflight"}]
    (floor / "floor.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    return floor / "floor.yml"


def fleet_vs_ping(work: Path, hosts: int, forks: int, runs: int, floor: bool = False) -> None:
    env = ansible_env(work)
    inventory = fleet_inventory(work / f"fleet-{hosts}.yml", hosts)
    # uncounted: one host per fixture through both, so every module either run loads has its bytecode
    warm = fleet_inventory(work / "fleet-warm.yml", len(FLEET_FIXTURES))
    for key, cmd in fleet_commands(work, warm, forks).items():
        timed(cmd, env, work / f"timeline-warm-{key}.jsonl")
    commands = fleet_commands(work, inventory, forks)
    if floor:
        stand_in = [str(floor_playbook(work, env)), *commands["fleet"][2:]]
        commands["floor"] = [commands["fleet"][0], *stand_in]
    samples: dict[str, list[float]] = {key: [] for key in commands}
    cpus: dict[str, list[float]] = {key: [] for key in commands}
    last: dict[str, list[dict[str, object]]] = {}
    for _ in range(runs):
        for key, cmd in commands.items():
            wall, cpu, rc, events = timed(cmd, env, work / f"timeline-{key}.jsonl")
            if rc != 0:
                raise RuntimeError(f"{key} run failed with {rc}: {' '.join(cmd)}")
            samples[key].append(wall)
            cpus[key].append(cpu)
            last[key] = events
    fleet, ping_wall = median(samples["fleet"]), median(samples["ping"])
    print(f"== (b) {hosts} simulated hosts (connection: local), -f {forks}, median of {runs}")
    print(f"  ansible all -m ping            {fmt(ping_wall)}   ({ping_wall / hosts * 1000:6.1f} ms/host)")
    print(f"  ansible-playbook preflight.yml {fmt(fleet)}   ({fleet / hosts * 1000:6.1f} ms/host)")
    ratio = fleet / ping_wall
    verdict = "met" if ratio <= FLEET_TARGET else "NOT met"
    print(f"  verdict: {verdict} -- fleet/ping {ratio:.2f}x against the target <= {FLEET_TARGET}x")
    # the runs' own CPU seconds: what they cost, steadier than wall time on a machine others load too
    ping_cpu, fleet_cpu = median(cpus["ping"]), median(cpus["fleet"])
    print(
        f"  CPU of the runs' processes: ping {fmt(ping_cpu).strip()}, playbook {fmt(fleet_cpu).strip()}"
        f" ({fleet_cpu / ping_cpu:.2f}x)"
        + (f", floor {fmt(median(cpus['floor'])).strip()} ({median(cpus['floor']) / ping_cpu:.2f}x)" if floor else "")
    )
    if floor:
        low = median(samples["floor"])
        print(
            f"  the floor, a stand-in module returning each host's saved result: {fmt(low).strip()}"
            f" ({low / ping_wall:.2f}x ping); the preflight pass itself: {fmt(fleet - low).strip()}"
        )
    print("  where the playbook's time goes (last run; first start -> last end per task):")
    runs_shown = [("", last["fleet"]), ("ping: ", last["ping"])]
    if floor:
        runs_shown.append(("floor: ", last["floor"]))
    for label, events in runs_shown:
        for task, (span, n) in phases(events).items():
            name = (label + task.rpartition(" : ")[2])[:56]
            print(f"    {name:<56} {fmt(span)}   {n} host(s)")


# --- (c) breakdown ---------------------------------------------------------------------------------


def wall_of(cmd: list[str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        samples.append(time.perf_counter() - start)
    return median(samples)


def in_process(fn: Callable[[], object], passes: int = 5) -> float:
    fn()
    samples = []
    for _ in range(passes):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return median(samples)


# One host's module work in a fresh process, as the preflight module does it: the module_utils import
# (the package, as the modules load it), then one pass on the host's root and the result as JSON. CPU
# seconds (this process's and its children's: the vendor-code fork, the host CLI) per phase.
HOST_PASS = """
import json, os, sys, time
def cpu():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system
marks = [cpu()]
import ansible.module_utils.basic
marks.append(cpu())
from ansible_collections.gpustack.accelerators.plugins.module_utils import gpustack
marks.append(cpu())
root = sys.argv[1]
report = gpustack.gpustack_api.run_preflight(gpustack.gpustack_api.make_request(root, None), host_root=root)
marks.append(cpu())
text = json.dumps({"report": report.wire(), "summary": report.summary(), "failures": report.failures()})
marks.append(cpu())
print(json.dumps([b - a for a, b in zip(marks, marks[1:])]))
"""


def host_passes(runs: int) -> dict[str, float]:
    """Median CPU seconds per phase of :data:`HOST_PASS` over every fleet fixture, ``runs`` rounds."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "collections")}
    phases: list[list[float]] = []
    for fixture in FLEET_FIXTURES:  # uncounted: the bytecode cache, every vendor's modules included
        cmd = [sys.executable, "-c", HOST_PASS, str(HOSTS / fixture)]
        subprocess.run(cmd, capture_output=True, env=env, check=True)
    for _ in range(runs):
        for fixture in FLEET_FIXTURES:
            out = subprocess.run(
                [sys.executable, "-c", HOST_PASS, str(HOSTS / fixture)],
                capture_output=True,
                text=True,
                check=True,
                env=env,
            ).stdout
            phases.append(json.loads(out.splitlines()[-1]))
    names = ["basic", "package", "pass", "json"]
    return {name: median([p[i] for p in phases]) for i, name in enumerate(names)}


def breakdown(runs: int) -> None:
    py = sys.executable
    bare = wall_of([py, "-c", "pass"], runs)
    basic = wall_of([py, "-c", "import ansible.module_utils.basic"], runs)
    host = host_passes(max(1, runs // 3))
    root = str(HOSTS / FACTS_HOST)
    req = api.make_request(root, None)
    detect = in_process(lambda: api.facts(req))
    preflight = in_process(lambda: api.run_preflight(req, dry_run=True, host_root=root))
    print(f"== (c) where a module's time goes on the target (wall: median of {runs}; in-process: warm)")
    print(f"  python -c pass                                  {fmt(bare)}")
    print(f"  + import ansible.module_utils.basic (ping pays)   {fmt(basic)}   (+{fmt(basic - bare).strip()})")
    print(f"  one host in a fresh process, CPU (median over the {len(FLEET_FIXTURES)} fleet fixtures):")
    print(f"    import ansible.module_utils.basic (ping pays) {fmt(host['basic'])}")
    print(f"    + the package, as module_utils imports it     {fmt(host['package'])}")
    print(f"    + one preflight pass, cold (its own imports)  {fmt(host['pass'])}")
    print(f"    + the result as JSON                          {fmt(host['json'])}")
    print(f"  facts pass, in process ({FACTS_HOST})           {fmt(detect)}")
    print(f"  preflight pass (dry run), in process, warm      {fmt(preflight)}")
    print(f"  machine: {os.cpu_count()} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs per measurement of (a) and (c) (default 5)")
    parser.add_argument("--fleet-runs", type=int, default=1, help="runs per command of (b) (default 1)")
    parser.add_argument("--hosts", type=int, default=200, help="simulated fleet size (default 200)")
    parser.add_argument(
        "-f", "--forks", type=int, action="append", help="forks for (b), as ansible's -f; repeatable (default 10)"
    )
    parser.add_argument("--only", choices=["facts", "fleet", "breakdown"], action="append")
    parser.add_argument("--floor", action="store_true", help="(b) also runs the playbook around a no-op module")
    args = parser.parse_args(argv)
    only = set(args.only or ["facts", "fleet", "breakdown"])
    with tempfile.TemporaryDirectory(prefix="gpa-bench-") as tmp:
        work = Path(tmp)
        os.chdir(REPO)
        env = ansible_env(work)  # ansible-runner and (c)'s children take the process environment
        for key in set(os.environ) - set(env):
            del os.environ[key]
        os.environ.update(env)
        if "breakdown" in only:
            breakdown(args.runs)
        if "facts" in only:
            facts_vs_setup(work, args.runs)
        if "fleet" in only:
            for forks in args.forks or [10]:
                fleet_vs_ping(work, args.hosts, forks, args.fleet_runs, args.floor)


if __name__ == "__main__":
    main()
