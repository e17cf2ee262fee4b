"""An API-server stand-in for Pods (see apiserver.py), for tests that drive the official client."""
