{{/*
Helpers shared by every template. This directory is hack/chart/templates of
the opkit repository, copied into each example's dist/chart by make chart
(hack/chartgen): edit it there, not in dist/.
*/}}

{{/* The chart's name, 63 characters at most. */}}
{{- define "chart.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: the release name, or release-chart when
the release name does not already contain the chart's.
*/}}
{{- define "chart.fullname" -}}
{{- $name := include "chart.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
The namespace the operator runs in: namespace.name when the chart creates
it, else the release's (helm -n).
*/}}
{{- define "chart.namespace" -}}
{{- if .Values.namespace.create }}
{{- required "namespace.name: name the namespace the chart creates (namespace.create is true)" .Values.namespace.name }}
{{- else }}
{{- .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
The labels of every object. The pods' are chart.selectorLabels only: a
Deployment's selector cannot change after install.
*/}}
{{- define "chart.labels" -}}
{{ include "chart.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Chart.AppVersion }}
app.kubernetes.io/version: {{ . | quote }}
{{- end }}
{{- end }}

{{/* The labels the Deployment and the metrics Service select pods by. */}}
{{- define "chart.selectorLabels" -}}
app.kubernetes.io/name: {{ include "chart.name" . }}
control-plane: controller-manager
{{- end }}

{{/* The manager's image reference: repository:tag, tag default appVersion. */}}
{{- define "chart.image" -}}
{{- $img := .Values.manager.image }}
{{- if contains "@" $img.repository }}
{{- $img.repository }}
{{- else }}
{{- printf "%s:%s" $img.repository ($img.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The name of the metrics port: https unless metrics.secure is false. */}}
{{- define "chart.metricsPortName" -}}
{{- if .Values.metrics.secure }}https{{ else }}http{{ end }}
{{- end }}

{{/*
"true" when the chart serves the operator's admission webhooks: its values
have webhook.enable (an operator with webhook configurations, written into
templates/webhook by make chart).
*/}}
{{- define "chart.webhook" -}}
{{- if and .Values.webhook .Values.webhook.enable }}true{{ end }}
{{- end }}

{{/* cert-manager issues the webhook's certificate (certManager.enable). */}}
{{- define "chart.certManager" -}}
{{- if and (include "chart.webhook" .) .Values.certManager .Values.certManager.enable }}true{{ end }}
{{- end }}

{{/* The Certificate whose CA cert-manager injects, as namespace/name. */}}
{{- define "chart.certManagerCA" -}}
{{ include "chart.namespace" . }}/{{ include "chart.fullname" . }}-serving-cert
{{- end }}

{{/* The replicas run as shards (sharding.enable, an operator with --shard). */}}
{{- define "chart.sharding" -}}
{{- if and .Values.sharding .Values.sharding.enable }}true{{ end }}
{{- end }}
