{{/* The CRDs of config/crd/bases, written by make chart. */}}
{{- define "chart.crds" }}
etcdbackups.etcd.opkit.dev
etcdclusters.etcd.opkit.dev
{{- end }}
