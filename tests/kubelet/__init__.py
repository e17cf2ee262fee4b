"""A kubelet stand-in for device-plugin tests (see standin.py) and its checkpoint format."""
