#!/usr/bin/env bash
# demo.sh: the memcached walkthrough on a local cluster (`make demo`).
#
# Starts opkit's local cluster unless $KUBECONFIG is set, installs the Memcached
# CRD, runs the memcached operator, applies a sample and prints the custom
# resource's status as it converges.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export PATH="$root/bin:$PATH"

if [[ -z "${KUBECONFIG:-}" ]]; then
	make --no-print-directory cluster-up
	export KUBECONFIG="$root/.local/kubeconfig"
	started_cluster=1
else
	echo "using the cluster of KUBECONFIG=$KUBECONFIG"
	started_cluster=0
fi

if [[ ! -d examples/memcached/config ]]; then
	cat <<MSG

The local cluster is up (KUBECONFIG=$KUBECONFIG), but this checkout has no
examples/memcached operator yet, so the walkthrough stops here.
Stop the cluster with: make cluster-down
MSG
	exit 0
fi

mkdir -p .local
echo ">> installing the Memcached CRD"
kubectl apply -f examples/memcached/config/crd/bases
kubectl wait --for=condition=Established crd/memcacheds.cache.opkit.dev --timeout=60s

echo ">> building and starting the memcached operator (log: .local/memcached-operator.log)"
(cd examples/memcached && go build -o ../../.local/memcached-operator .)
.local/memcached-operator --metrics-bind-address=127.0.0.1:0 --metrics-secure=false --health-probe-bind-address=127.0.0.1:0 \
	>.local/memcached-operator.log 2>&1 &
operator=$!
trap 'kill $operator 2>/dev/null || true' EXIT

echo ">> applying examples/memcached/config/samples"
kubectl apply -f examples/memcached/config/samples
echo ">> waiting for the Memcached to become Ready"
for _ in $(seq 1 60); do
	kubectl get memcacheds -o wide
	if kubectl wait --for=condition=Ready memcached --all --timeout=2s >/dev/null 2>&1; then
		break
	fi
	sleep 2
done
kubectl get memcached -o yaml | sed -n '/^  status:/,$p'
kubectl get deployments,services,poddisruptionbudgets,pods -l app.kubernetes.io/managed-by=opkit-memcached

cat <<MSG

The demo is done; its operator stopped with it, the cluster is still up.
To keep playing, run the operator in one terminal:
  make run-memcached
and in another:
  export KUBECONFIG=$KUBECONFIG PATH=$root/bin:\$PATH
  kubectl patch memcached memcached-sample --type=merge -p '{"spec":{"size":4}}'
  kubectl get memcached memcached-sample -w
Stop everything with: make cluster-down$( ((started_cluster)) || echo " (not started by the demo: left running)")
MSG
