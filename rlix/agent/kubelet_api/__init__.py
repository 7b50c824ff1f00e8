"""Generated message modules of the kubelet's gRPC contracts (``make protos``).

``dra_v1.proto`` and ``pluginregistration_v1.proto`` are RLix's own minimal
copies of the wire contract of k8s.io/kubelet (see each file's header); the
``*_pb2`` modules and their ``.pyi`` stubs are generated from them and checked
to be current by tests/components/test_kubelet_api.py.
"""
