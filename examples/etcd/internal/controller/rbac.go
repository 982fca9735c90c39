package controller

// The operator's permissions, generated into config/rbac by
// `make manifests`. Create on pods/portforward is for
// --member-access=port-forward (an operator outside the cluster) only.
// Core/v1 events: leader election records "became leader" with the older
// events API, in the Lease's namespace.
//
// +kubebuilder:rbac:groups=etcd.opkit.dev,resources=etcdclusters;etcdbackups,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=etcd.opkit.dev,resources=etcdclusters/status;etcdbackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=etcd.opkit.dev,resources=etcdclusters/finalizers;etcdbackups/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods;persistentvolumeclaims;services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=pods/portforward,verbs=create
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
