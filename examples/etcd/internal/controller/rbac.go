package controller

// The operator's permissions, generated into config/rbac by
// `make manifests`: only what it does. Children (pods, claims, Services,
// PodDisruptionBudgets) are server-side applied (patch; create for the
// first apply), deleted, and read from the cache (list, watch); never
// updated. Secrets (an S3 store's configuration, the certificates of
// spec.tls) are read one at a time through the API reader (get), never
// listed or watched: list on Secrets, even for their metadata, would let
// the operator read every Secret of the cluster. A converged TLS cluster
// reads its certificates again on each health poll, so a renewal rolls
// out within about 30 s. spec.tls.auto creates and renews (update) its
// own certificates' Secrets. Leader election
// (its Lease and the core/v1 "became leader" Event) is granted in the
// operator's namespace only, by config/rbac/leader_election_role.yaml.
// The TokenReview and SubjectAccessReview rights serve the metrics
// endpoint's authentication and authorisation (--metrics-secure). Create
// on pods/portforward, for --member-access=port-forward (an operator
// outside the cluster), is granted by config/portforward only. ConfigMaps
// are the clusters' guards (see LabelGuardOf): created, read from the
// cache, patched (the guard's finalizer) and deleted. A member's PersistentVolume and its node are read
// (get) only while the member's pod does not run, to tell a node declared
// gone (see EventMemberNodeLost). Namespaces' metadata is cached (list,
// watch): the final backup starts when a cluster's namespace starts going
// (reconcile.WithNamespaceDeletion; see EventFinalBackupBlocked).
// With --webhook-cert-secret the operator writes its CA into its
// ValidatingWebhookConfiguration (config/webhook has the Role for the
// certificate's Secret).
//
// +kubebuilder:rbac:groups=etcd.opkit.dev,resources=etcdclusters;etcdbackups,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=etcd.opkit.dev,resources=etcdclusters/status;etcdbackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=etcd.opkit.dev,resources=etcdclusters/finalizers;etcdbackups/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods;persistentvolumeclaims;services,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update;delete
// +kubebuilder:rbac:groups="",resources=nodes;persistentvolumes,verbs=get
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;list;watch;update
