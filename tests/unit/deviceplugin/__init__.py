"""The device plugin's gRPC edge (issue 10): real gRPC over unix sockets, a fake allocator core."""
