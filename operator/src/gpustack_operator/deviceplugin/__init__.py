"""The device plugin's gRPC edge: the kubelet's v1beta1 DevicePlugin/Registration and pod-resources
v1 APIs (stubs in ``api/``, generated at build time), adapting them to the pure allocator core
(``gpustack_operator.allocator``). No allocation logic lives here."""
