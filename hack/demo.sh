#!/usr/bin/env bash
# demo.sh: the memcached walkthrough on a local cluster (`make demo`).
#
# Starts opkit's local cluster unless $KUBECONFIG is set, installs the Memcached
# CRD, runs the memcached operator, applies a sample and prints the custom
# resource's status as it converges.
#
# It refuses a $KUBECONFIG whose API server is not on this machine unless
# DEMO_ALLOW_REMOTE=1, and leaves nothing of its own behind, also on failure
# and Ctrl-C: the sample is deleted while the operator still runs (so its
# finalizer is honoured), then the operator stops; the CRD is removed again
# from a cluster the demo did not start, if the demo installed it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export PATH="$root/bin:$PATH"

if [[ -z "${KUBECONFIG:-}" ]]; then
	make --no-print-directory cluster-up
	export KUBECONFIG="$root/.local/kubeconfig"
	started_cluster=1
else
	server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
	host=${server#*://}
	host=${host%%/*}
	host=${host%:*}
	case "$host" in
	127.* | localhost | "[::1]") ;;
	*)
		if [[ "${DEMO_ALLOW_REMOTE:-}" != 1 ]]; then
			cat >&2 <<MSG
KUBECONFIG=$KUBECONFIG points at $server, which is not on this machine.
The demo installs the Memcached CRD there and runs an operator against it.
Unset KUBECONFIG to use a local cluster, or run DEMO_ALLOW_REMOTE=1 make demo.
MSG
			exit 1
		fi
		;;
	esac
	echo "using the cluster of KUBECONFIG=$KUBECONFIG ($server)"
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
crd=crd/memcacheds.cache.opkit.dev
installed_crd=0
kubectl get "$crd" >/dev/null 2>&1 || installed_crd=1
operator=""
applied=0

# cleanup removes what the demo made: the sample first, while the operator
# can still finalize it, then the operator, then the CRD if the demo
# installed it on a cluster it did not start.
cleanup() {
	set +e
	if ((applied)); then
		echo ">> deleting the sample"
		kubectl delete -f examples/memcached/config/samples --ignore-not-found --timeout=60s >/dev/null
	fi
	if [[ -n "$operator" ]]; then
		kill "$operator" 2>/dev/null
		wait "$operator" 2>/dev/null
	fi
	if ((installed_crd)) && ! ((started_cluster)); then
		echo ">> removing the Memcached CRD the demo installed"
		kubectl delete "$crd" --ignore-not-found >/dev/null
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo ">> installing the Memcached CRD"
kubectl apply -f examples/memcached/config/crd/bases
kubectl wait --for=condition=Established "$crd" --timeout=60s

echo ">> building and starting the memcached operator (log: .local/memcached-operator.log)"
(cd examples/memcached && go build -o ../../.local/memcached-operator .)
.local/memcached-operator --metrics-bind-address=127.0.0.1:0 --metrics-secure=false --health-probe-bind-address=127.0.0.1:0 \
	>.local/memcached-operator.log 2>&1 &
operator=$!

echo ">> applying examples/memcached/config/samples"
applied=1
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

The demo is done: its sample is deleted and its operator stops with it$( ((started_cluster)) && echo "; the
cluster is still up" || echo ", and the CRD
is removed if the demo installed it"). To keep playing, run the operator in one terminal:
  make run-memcached
and in another:
  export KUBECONFIG=$KUBECONFIG PATH=$root/bin:\$PATH
  kubectl apply -f examples/memcached/config/crd/bases -f examples/memcached/config/samples
  kubectl patch memcached memcached-sample --type=merge -p '{"spec":{"replicas":4}}'
  kubectl get memcached memcached-sample -w
$( ((started_cluster)) && echo "Stop the cluster with: make cluster-down" || echo "Delete the sample before you stop the operator: it carries a finalizer.")
MSG
