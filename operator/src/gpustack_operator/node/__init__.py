"""What the node is made of, read below every manufacturer: the PCI scan (``pci.py``), the CPU
identity (``cpu.py``) and the Kubernetes label naming rules ids are built with (``naming.py``).

They sit under ``manufacturers/`` (which build groups and ids with them) and ``discovery/`` (which
runs the detection loop over the manufacturers): a layer never imports from the one above it.
"""
