"""``device-manager preflight``: three questions, three states, three depths (spec: Preflight)."""
