package controller

// The operator's permissions, generated into config/rbac by
// `make manifests`. Create on pods/portforward is for
// --member-access=port-forward (an operator outside the cluster) only.
// Leader election (its Lease and the core/v1 "became leader" Event) is
// granted in the operator's namespace only, by
// config/rbac/leader_election_role.yaml. The TokenReview and
// SubjectAccessReview rights serve the metrics endpoint's authentication
// and authorisation (--metrics-secure).
//
// +kubebuilder:rbac:groups=etcd.opkit.dev,resources=etcdclusters;etcdbackups,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=etcd.opkit.dev,resources=etcdclusters/status;etcdbackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=etcd.opkit.dev,resources=etcdclusters/finalizers;etcdbackups/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods;persistentvolumeclaims;services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=pods/portforward,verbs=create
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
