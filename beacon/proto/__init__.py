"""
The A2A 1.0 data model and gRPC service as protocol buffers: ``a2a.proto``
(the specification's, with its licence) and the modules ``make proto``
generates from it with grpcio-tools (``a2a_pb2``, ``a2a_pb2_grpc``).

Importing this package imports nothing; ``beacon.proto.a2a_pb2`` needs
``protobuf`` and ``googleapis-common-protos``, ``a2a_pb2_grpc`` needs
``grpcio``: the ``grpc`` extra (``pip install 'beacon-a2a[grpc]'``) brings them.

The generated module registers ``lf.a2a.v1`` in protobuf's default pool, as
a2a-sdk's own ``a2a.types.a2a_pb2`` does: one process cannot import both.
"""
