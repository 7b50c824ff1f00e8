#!/usr/bin/env bash
# `make protos`: the Python modules of the kubelet's gRPC contracts the node agent
# serves (rlix/agent/kubelet_api/*.proto, RLix's own minimal copies of the wire
# contract) with grpcio-tools' protoc. Only message modules (*_pb2.py and their
# *.pyi stubs): the services are registered by name in rlix/agent/kubelet_plugin.py,
# so no untyped *_pb2_grpc module is needed. The generated files are committed (the
# image build and the agent need no protoc); tests/components/test_kubelet_api.py
# fails when they differ from what this script generates.
#
#   hack/protos.sh [OUT_DIR]   (default: rlix/agent/kubelet_api, in place)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
[[ "$python" == /* ]] || python=$PWD/$python
api=rlix/agent/kubelet_api
out=$(realpath -m "${1:-$root/$api}")
mkdir -p "$out"
cd "$root/$api"
"$python" -m grpc_tools.protoc --proto_path=. --python_out="$out" --pyi_out="$out" ./*.proto
