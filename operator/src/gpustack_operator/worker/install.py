"""Image mode (supplement §8): where no chart deployed the worker, it installs its packaged chart.

Chart mode runs the worker with ``--disable-applications=*`` (the chart's ``worker.disableApplications``
default); that is the only sign §8 gives of a chart having deployed it, so image mode is taken as: ``*``
is not among the disabled applications. Then the worker installs
``${GPUSTACK_CONF_DIR:-/etc/gpustack}/charts/gpustack-operator-<version>.tgz`` (``--chart`` overrides)
as the release ``gpustack-operator-device-manager`` in its own namespace, through the ``helm`` binary
(``--helm-binary``, default ``$HELM_BINARY``, else ``helm`` on ``PATH``)::

    helm upgrade --install gpustack-operator-device-manager CHART --namespace NS --values VALUES.json
         [--kubeconfig FILE | --kube-apiserver URL]

with the values (:func:`install_values`):

- ``worker.enabled: false`` -- this process is the worker; the release must not render another;
- ``deviceManager.env``: every ``GPUSTACK_*`` variable of the worker's own environment (§4.3: the worker
  copies them onto the Device Manager DaemonSets); a name outside the chart's ``GPUSTACK_[A-Z0-9_]+``
  is left out, with one warning naming it;
- ``node-feature-discovery.enabled: false`` when ``node-feature-discovery`` is disabled.

``device-manager`` disabled leaves nothing of this chart to install: no helm run. ``kueue``,
``csi-driver-nfs``, ``csi-driver-s3`` and ``model-manager`` are not packaged in this chart: their
``--disable-applications`` entries change nothing here.

The install runs on the leader (once per process, after it first leads), on a thread of its own so the
controllers never wait for helm; a failed run is retried with a backoff (5 s doubling to 5 min), one
log line each, helm's own last output lines included.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpustack_operator import __version__

log = logging.getLogger(__name__)

RELEASE = "gpustack-operator-device-manager"
DEFAULT_CONF_DIR = "/etc/gpustack"
ENV_NAME = re.compile(r"GPUSTACK_[A-Z0-9_]+")  # the chart's deviceManager.env propertyNames
HELM_TIMEOUT = 600.0
NOT_PACKAGED = ("kueue", "csi-driver-nfs", "csi-driver-s3", "model-manager")


def packaged_chart(env: Mapping[str, str]) -> Path:
    """``${GPUSTACK_CONF_DIR:-/etc/gpustack}/charts/gpustack-operator-<version>.tgz`` (supplement §8)."""
    conf = env.get("GPUSTACK_CONF_DIR") or DEFAULT_CONF_DIR
    return Path(conf) / "charts" / f"gpustack-operator-{__version__}.tgz"


def image_mode(disabled: Sequence[str]) -> bool:
    """Did no chart deploy this worker? (chart mode runs ``--disable-applications=*``)"""
    return "*" not in disabled


def forwarded_env(env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The worker's ``GPUSTACK_*`` variables for ``deviceManager.env``, and the names left out (a
    ``GPUSTACK_`` name the chart's schema refuses)."""
    names = sorted(name for name in env if name.startswith("GPUSTACK_"))
    kept = {name: env[name] for name in names if ENV_NAME.fullmatch(name)}
    return kept, [name for name in names if name not in kept]


def install_values(disabled: Sequence[str], env: Mapping[str, str]) -> dict[str, Any]:
    """The values the release is installed with (see the module docstring)."""
    kept, _ = forwarded_env(env)
    values: dict[str, Any] = {"worker": {"enabled": False}, "deviceManager": {"env": kept}}
    if "node-feature-discovery" in disabled:
        values["node-feature-discovery"] = {"enabled": False}
    return values


@dataclass(frozen=True)
class InstallPlan:
    """Everything one helm run needs."""

    helm: str
    chart: str
    namespace: str
    values: dict[str, Any]
    kubeconfig: str | None = None
    api_server: str | None = None
    timeout: float = HELM_TIMEOUT

    def argv(self, values_file: str) -> list[str]:
        argv = [self.helm, "upgrade", "--install", RELEASE, self.chart, "--namespace", self.namespace]
        argv += ["--values", values_file]
        if self.kubeconfig:
            argv += ["--kubeconfig", self.kubeconfig]
        elif self.api_server:
            argv += ["--kube-apiserver", self.api_server]
        return argv


def plan_install(
    disabled: Sequence[str],
    env: Mapping[str, str],
    *,
    namespace: str,
    helm: str | None = None,
    chart: str | None = None,
    kubeconfig: str | None = None,
    api_server: str | None = None,
) -> InstallPlan | None:
    """The install image mode runs, or ``None`` (chart mode, or ``device-manager`` disabled), saying
    once which and why."""
    if not image_mode(disabled):
        return None
    for app in NOT_PACKAGED:
        if app in disabled:
            log.info("--disable-applications %s: not packaged in this chart, nothing to disable", app)
    if "device-manager" in disabled:
        log.info("image mode: --disable-applications device-manager leaves nothing to install")
        return None
    _, refused = forwarded_env(env)
    if refused:
        log.warning("image mode: %s not passed to the Device Manager (not GPUSTACK_[A-Z0-9_]+)", ", ".join(refused))
    return InstallPlan(
        helm=helm or env.get("HELM_BINARY") or "helm",
        chart=chart or str(packaged_chart(env)),
        namespace=namespace,
        values=install_values(disabled, env),
        kubeconfig=kubeconfig,
        api_server=api_server,
    )


def run_helm(plan: InstallPlan) -> str | None:
    """One ``helm upgrade --install``; ``None`` when it succeeded, else one line saying why."""
    with tempfile.TemporaryDirectory(prefix="gpustack-install-") as tmp:
        values_file = os.path.join(tmp, "values.json")  # JSON is YAML: helm reads it as --values
        Path(values_file).write_text(json.dumps(plan.values, sort_keys=True))
        try:
            done = subprocess.run(
                plan.argv(values_file), capture_output=True, text=True, timeout=plan.timeout, check=False
            )
        except FileNotFoundError:
            return f"no helm binary at {plan.helm!r} (--helm-binary or HELM_BINARY)"
        except PermissionError:
            return f"{plan.helm!r} is not executable"
        except subprocess.TimeoutExpired:
            return f"helm did not finish within {plan.timeout:.0f}s"
    if done.returncode != 0:
        tail = " | ".join(line.strip() for line in (done.stderr or done.stdout).strip().splitlines()[-3:])
        return f"helm exited {done.returncode}: {tail or 'no output'}"
    return None


@dataclass
class ChartInstaller:
    """Runs :class:`InstallPlan` once on a thread, retrying a failure (see the module docstring)."""

    plan: InstallPlan
    backoff_initial: float = 5.0
    backoff_max: float = 300.0
    attempts: int = 0
    installed: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ChartInstaller:
        if self._thread is None:
            self._thread = threading.Thread(target=self.run, name="image-mode-install", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> bool:
        """Until installed or stopped; whether it was installed."""
        delay = self.backoff_initial
        log.info("image mode: installing %s as release %s in %s", self.plan.chart, RELEASE, self.plan.namespace)
        while not self._stop.is_set():
            self.attempts += 1
            failure = run_helm(self.plan)
            if failure is None:
                log.info("image mode: release %s installed", RELEASE)
                self.installed.set()
                return True
            log.warning("image mode: installing release %s failed (retrying in %.0fs): %s", RELEASE, delay, failure)
            self._stop.wait(delay)
            delay = min(delay * 2, self.backoff_max)
        return False


__all__ = [
    "RELEASE",
    "ChartInstaller",
    "InstallPlan",
    "forwarded_env",
    "image_mode",
    "install_values",
    "packaged_chart",
    "plan_install",
    "run_helm",
]
