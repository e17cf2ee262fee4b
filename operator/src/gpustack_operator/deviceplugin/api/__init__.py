"""The kubelet's gRPC APIs as generated Python: ``deviceplugin_pb2`` / ``deviceplugin_pb2_grpc``
(device plugin v1beta1) and ``podresources_pb2`` / ``podresources_pb2_grpc`` (pod-resources v1).

Nothing here is written by hand or committed: ``setup.py`` runs grpcio-tools' ``protoc`` over
``operator/proto/gpustack_operator/deviceplugin/api/*.proto`` at build time (a wheel, or the
editable install ``make setup`` makes), and the generated modules are git-ignored.
"""
