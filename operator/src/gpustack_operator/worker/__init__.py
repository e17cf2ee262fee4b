"""``gpustack-operator worker``: the cluster side of the operator (issue 19; docs/worker.md).

One file per part:

* ``startup.py`` -- the startup steps every replica runs before the election: the CRDs, the rule;
* ``rule.py`` -- the ``gpustack-cpu-info`` NodeFeatureRule (pure);
* ``nodekey.py`` -- controller (a): the general node key and the managed mark on the NodeFeature
  ``<node>-gpustack-worker``;
* ``managed.py`` -- controller (b): the ``gpustack.ai/managed`` mark from a Node onto its ``Devices``;
* ``devicesgc.py`` -- controller (c): a departed node's ``Devices`` deleted on an uncached read;
* ``leader.py`` -- (d) leader election through a Lease;
* ``install.py`` -- image mode: the packaged chart installed through ``helm`` (supplement §8);
* ``memory.py`` -- glibc's mmap threshold pinned (a freed list page goes back to the system);
* ``run.py`` -- the process: caches, the election, the controllers' loop, the stop;
* ``cli.py`` -- the subcommand's flags.

Every API call goes through ``gpustack_operator.kube`` (``apply.py``, ``lease.py``, ``objectwatch.py``).
"""
