"""The Devices ledger: its models (the CRD's spec/status) and the pure accounting rules."""
