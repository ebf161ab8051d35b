"""Generated gRPC code of the kubelet APIs (see the .proto files); regenerate with libs/kubelet/gen-proto."""
