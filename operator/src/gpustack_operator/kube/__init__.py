"""The API-server edge: the only package that talks to the Kubernetes API server (through the
official ``kubernetes`` client). It is imported by ``device-manager serve`` alone, so detect, preflight
and the Ansible modules never load the client."""
