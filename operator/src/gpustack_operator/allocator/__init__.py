"""The device-plugin allocator's pure core (no gRPC, no API server, no filesystem of its own).

- ``resources.py``  resource names and token ids per manufacturer and family (reference rules §6);
- ``ledger.py``     units, credits and cost per token per mode (reference rules §5), slots;
- ``budget.py``     a sliced container's budgets from its requests;
- ``placement.py``  ``GetPreferredAllocation`` order (supplement §1.9) and partition packing;
- ``identify.py``   which container an anonymous ``Allocate`` serves (supplement §1.8);
- ``cdi.py``        the CDI strategy (``envvar | cdi-annotations | auto``, reference rules §11);
- ``pods.py``       what the allocator reads of Pods (``PodSpec``, the kubelet's ``List``) and the
                    protocols its edges implement (``PodSource``, ``AnnotationRecorder``);
- ``capacity.py``   the node capacity keys (supplement §5.2) from the served pools;
- ``recovery.py``   restart recovery's sources, in order of authority (pure);
- ``core.py``       :class:`~gpustack_operator.allocator.core.Allocator`: one manufacturer's pools,
                    reservations under one node-wide lock, the cross-mode invariant, health, and the
                    responder call -- the only object the gRPC edge (``deviceplugin/``) talks to. Its
                    other sides are mixins kept in files of their own: ``listing.py`` (what is
                    advertised, the hint), ``claims.py`` (claims per family, the grant),
                    ``reconcile.py`` (release of gone and finished Pods) and ``durable.py`` (the
                    annotation, give-back, restart recovery).
"""
