{{/* The CRDs of config/crd/bases, written by make chart. */}}
{{- define "chart.crds" }}
memcacheds.cache.opkit.dev
{{- end }}
