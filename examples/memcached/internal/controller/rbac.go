package controller

// The operator's permissions, generated into config/rbac/role.yaml by
// `make manifests`. Least privilege: children are written by server-side
// apply (patch; create for the first apply) and never updated with PUT; only
// PodDisruptionBudgets are deleted by the operator (the garbage collector
// deletes the rest); pods are only listed and watched, as metadata. A
// child the label-filtered cache does not hold is read once through the API
// reader (get) before it is created, so that an object of someone else with
// the same name is never taken over. Memcacheds carry no finalizer: patch
// on memcacheds only releases the finalizer an earlier version added, and
// update on memcacheds/finalizers lets the children's controller references
// block their owner's deletion (blockOwnerDeletion).

// +kubebuilder:rbac:groups=cache.opkit.dev,resources=memcacheds,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=cache.opkit.dev,resources=memcacheds/status,verbs=patch
// +kubebuilder:rbac:groups=cache.opkit.dev,resources=memcacheds/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
