package repo

// Operator is one of the example operators that users install in-cluster:
// its Makefile has the deployment targets (hack/operator.mk) and it has a
// Helm chart (dist/chart).
type Operator struct {
	// Dir is its directory under examples/.
	Dir string
	// Name is config/default's name prefix without its dash, the prefix
	// of every object make deploy installs, and the Helm release name that
	// gives the chart's objects the same names.
	Name string
	// Namespace is config/default's namespace.
	Namespace string
}

// Operators are the example operators with deployment targets.
var Operators = []Operator{
	{Dir: "memcached", Name: "memcached-operator", Namespace: "memcached-system"},
	{Dir: "etcd", Name: "etcd-operator", Namespace: "etcd-operator-system"},
}
