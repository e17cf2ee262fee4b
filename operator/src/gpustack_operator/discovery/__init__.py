"""Discovery: PCI scan, CPU identity, label naming, the detection loop (spec: Device Discovery)."""
