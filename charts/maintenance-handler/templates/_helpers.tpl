{{/* Labels on every object: the kustomize base's, and Helm's own. */}}
{{- define "mh.labels" -}}
app.kubernetes.io/name: maintenance-handler
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* Labels on the pods: those of mh.labels that do not change with the
chart's version alone, so that a chart bump that changes nothing they run
rolls no pod. */}}
{{- define "mh.podLabels" -}}
app.kubernetes.io/name: maintenance-handler
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The image of the agent and the aggregator. */}}
{{- define "mh.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The agent's namespace: its own, apart from the release's, so that
the namespace that must allow the host network holds no Secret of the
aggregator's. */}}
{{- define "mh.agentNamespace" -}}
{{ .Values.agent.namespace.name | default (printf "%s-agent" .Release.Namespace) }}
{{- end }}

{{/* The agent's service account as the API server names its user. */}}
{{- define "mh.agentUser" -}}
system:serviceaccount:{{ include "mh.agentNamespace" . }}:{{ include "mh.agentServiceAccount" . }}
{{- end }}

{{/* The aggregator's service account as the API server names its user. */}}
{{- define "mh.aggregatorUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "mh.aggregatorServiceAccount" . }}
{{- end }}

{{/* The settings the agents and the aggregator must share, as flags:
only those set, so that the binaries' defaults hold otherwise. */}}
{{- define "mh.sharedArgs" -}}
{{- with .Values.poolLabel }}
- --pool-label={{ . }}
{{- end }}
{{- with .Values.sliceLabel }}
- --slice-label={{ . }}
{{- end }}
{{- if ne .Values.reservationGroups "none" }}
- --reservation-groups={{ .Values.reservationGroups }}
{{- end }}
{{- if .Values.observeOnly }}
- --observe-only
{{- end }}
{{- end }}

{{/* The container security context of both. */}}
{{- define "mh.securityContext" -}}
runAsNonRoot: true
runAsUser: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities: {drop: ["ALL"]}
seccompProfile: {type: RuntimeDefault}
{{- end }}

{{/* The agent's and the aggregator's service accounts. */}}
{{- define "mh.agentServiceAccount" -}}
{{ .Values.agent.serviceAccount.name | default "maintenance-handler-agent" }}
{{- end }}
{{- define "mh.aggregatorServiceAccount" -}}
{{ .Values.aggregator.serviceAccount.name | default "maintenance-handler-aggregator" }}
{{- end }}
