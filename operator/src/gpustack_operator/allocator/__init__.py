"""The device-plugin allocator's pure core (no gRPC, no API server, no filesystem of its own).

- ``resources.py``  resource names and token ids per manufacturer and family (reference rules §6);
- ``ledger.py``     units, credits and cost per token per mode (reference rules §5), slots;
- ``budget.py``     a sliced container's budgets from its requests;
- ``placement.py``  ``GetPreferredAllocation`` order (supplement §1.9) and partition packing;
- ``identify.py``   which container an anonymous ``Allocate`` serves (supplement §1.8);
- ``cdi.py``        the CDI strategy (``envvar | cdi-annotations | auto``, reference rules §11);
- ``core.py``       :class:`~gpustack_operator.allocator.core.Allocator`: one manufacturer's pools,
                    reservations under one node-wide lock, the cross-mode invariant, health, and the
                    responder call -- the only object the gRPC edge (``deviceplugin/``) talks to.
"""
