{{/* The rules of config/rbac/role.yaml (controller-gen), written by make chart. */}}
{{- define "chart.managerRules" }}
- apiGroups:
  - ""
  resources:
  - pods
  verbs:
  - list
  - watch
- apiGroups:
  - ""
  resources:
  - services
  verbs:
  - create
  - get
  - list
  - patch
  - watch
- apiGroups:
  - admissionregistration.k8s.io
  resources:
  - validatingwebhookconfigurations
  verbs:
  - get
  - list
  - update
  - watch
- apiGroups:
  - apiextensions.k8s.io
  resources:
  - customresourcedefinitions
  verbs:
  - get
  - list
  - watch
- apiGroups:
  - apiextensions.k8s.io
  resourceNames:
  - memcacheds.cache.opkit.dev
  resources:
  - customresourcedefinitions
  - customresourcedefinitions/status
  verbs:
  - update
- apiGroups:
  - apps
  resources:
  - deployments
  verbs:
  - create
  - get
  - list
  - patch
  - watch
- apiGroups:
  - authentication.k8s.io
  resources:
  - tokenreviews
  verbs:
  - create
- apiGroups:
  - authorization.k8s.io
  resources:
  - subjectaccessreviews
  verbs:
  - create
- apiGroups:
  - cache.opkit.dev
  resources:
  - memcacheds
  verbs:
  - get
  - list
  - patch
  - watch
- apiGroups:
  - cache.opkit.dev
  resources:
  - memcacheds/finalizers
  verbs:
  - update
- apiGroups:
  - cache.opkit.dev
  resources:
  - memcacheds/status
  verbs:
  - patch
- apiGroups:
  - events.k8s.io
  resources:
  - events
  verbs:
  - create
  - patch
- apiGroups:
  - policy
  resources:
  - poddisruptionbudgets
  verbs:
  - create
  - delete
  - get
  - list
  - patch
  - watch
{{- end }}
