{{/* The flags the chart's typed values set (docs/flags.md's chart column
names each flag's value): only those set, so that the binaries' defaults
hold otherwise and the default render carries none of them. */}}

{{/* mh.flag is "- --NAME=VALUE" for a value set, called with (list NAME
VALUE): a string not empty, a number not 0 (a whole one as an integer), a
list not empty (joined by commas), and "- --NAME" for true. */}}
{{- define "mh.flag" -}}
{{- $name := index . 0 }}
{{- $v := index . 1 }}
{{- if kindIs "bool" $v }}
{{- if $v }}
- --{{ $name }}
{{- end }}
{{- else if kindIs "slice" $v }}
{{- if $v }}
- {{ printf "--%s=%s" $name (join "," $v) | quote }}
{{- end }}
{{- else if and (or (kindIs "float64" $v) (kindIs "int64" $v) (kindIs "int" $v)) $v }}
{{- if eq (float64 (int64 $v)) (float64 $v) }}
- --{{ $name }}={{ int64 $v }}
{{- else }}
- --{{ $name }}={{ $v }}
{{- end }}
{{- else if $v }}
- {{ printf "--%s=%s" $name (toString $v) | quote }}
{{- end }}
{{- end }}

{{/* The agent's flags set by values (but those of mh.sharedArgs and the
ports). */}}
{{- define "mh.agentFlags" -}}
{{- $a := .Values.agent }}
{{- include "mh.flag" (list "notice-allowed-cidrs" $a.noticeAllowedCIDRs) }}
{{- include "mh.flag" (list "metadata-timeout" $a.metadataTimeout) }}
{{- include "mh.flag" (list "unhealthy-after" $a.unhealthyAfter) }}
{{- include "mh.flag" (list "host-maintenance-deadline" $a.hostMaintenanceDeadline) }}
{{- include "mh.flag" (list "preemption-deadline" $a.preemptionDeadline) }}
{{- include "mh.flag" (list "preemption-notice" $a.preemptionNotice) }}
{{- include "mh.flag" (list "known-end" $a.knownEnd) }}
{{- include "mh.flag" (list "known-end-lead" $a.knownEndLead) }}
{{- include "mh.flag" (list "ongoing-deadline" $a.ongoingDeadline) }}
{{- include "mh.flag" (list "manual-drain-timeout" $a.manualDrainTimeout) }}
{{- include "mh.flag" (list "manual-drain-escalate" $a.manualDrainEscalate) }}
{{- include "mh.flag" (list "manual-start-timeout" $a.manualStartTimeout) }}
{{- include "mh.flag" (list "voluntary-failure-cooldown" $a.voluntaryFailureCooldown) }}
{{- include "mh.flag" (list "opportunistic-trigger-max-age" $a.opportunisticTriggerMaxAge) }}
{{- include "mh.flag" (list "report-timeout" $a.reportTimeout) }}
{{- include "mh.flag" (list "eviction-retry-interval" $a.evictionRetryInterval) }}
{{- include "mh.flag" (list "drain-reserve" $a.drainReserve) }}
{{- include "mh.flag" (list "drain-margin" $a.drainMargin) }}
{{- include "mh.flag" (list "accelerator-resources" $a.acceleratorResources) }}
{{- include "mh.flag" (list "accelerator-device-classes" $a.acceleratorDeviceClasses) }}
{{- include "mh.flag" (list "kube-api-qps" $a.kubeAPIQPS) }}
{{- include "mh.flag" (list "kube-api-burst" $a.kubeAPIBurst) }}
{{- include "mh.flag" (list "log-level" $a.logLevel) }}
{{- include "mh.flag" (list "compute-endpoint" .Values.computeEndpoint) }}
{{- end }}

{{/* The aggregator's flags set by values (but those of mh.sharedArgs, the
ports, the eviction check's callers and the notifier's). */}}
{{- define "mh.aggregatorFlags" -}}
{{- $a := .Values.aggregator }}
{{- include "mh.flag" (list "interval" $a.interval) }}
{{- include "mh.flag" (list "unhealthy-after" $a.unhealthyAfter) }}
{{- include "mh.flag" (list "lease-duration" $a.leaseDuration) }}
{{- include "mh.flag" (list "renew-deadline" $a.renewDeadline) }}
{{- include "mh.flag" (list "retry-period" $a.retryPeriod) }}
{{- include "mh.flag" (list "kube-api-qps" $a.kubeAPIQPS) }}
{{- include "mh.flag" (list "kube-api-burst" $a.kubeAPIBurst) }}
{{- include "mh.flag" (list "eviction-check-qps" $a.evictionCheckQPS) }}
{{- include "mh.flag" (list "eviction-check-burst" $a.evictionCheckBurst) }}
{{- include "mh.flag" (list "gke-opportunistic-config" $a.gkeOpportunisticConfig) }}
{{- include "mh.flag" (list "reservations" $a.reservations) }}
{{- include "mh.flag" (list "reservation-interval" $a.reservationInterval) }}
{{- include "mh.flag" (list "maintain-unused-capacity" $a.maintainUnusedCapacity) }}
{{- include "mh.flag" (list "project" $a.project) }}
{{- include "mh.flag" (list "regions" $a.regions) }}
{{- $status := include "mh.autoscalerStatus" . }}
{{- if ne $status (include "mh.autoscalerStatusDefault" .) }}
- {{ printf "--autoscaler-status=%s" $status | quote }}
{{- end }}
{{- include "mh.flag" (list "repair-ask-grace" $a.repairAskGrace) }}
{{- include "mh.flag" (list "trigger-answer-timeout" $a.triggerAnswerTimeout) }}
{{- include "mh.flag" (list "recreate-window" $a.recreateWindow) }}
{{- include "mh.flag" (list "log-level" $a.logLevel) }}
{{- include "mh.flag" (list "compute-endpoint" .Values.computeEndpoint) }}
{{- end }}

{{/* The aggregator's --autoscaler-status by default. */}}
{{- define "mh.autoscalerStatusDefault" -}}
kube-system/cluster-autoscaler-status
{{- end }}

{{/* The autoscaler status the aggregator reads: the value, or the
default where it was removed (null). */}}
{{- define "mh.autoscalerStatus" -}}
{{- $status := .Values.aggregator.autoscalerStatus }}
{{- if kindIs "string" $status }}{{ $status }}{{ else }}{{ include "mh.autoscalerStatusDefault" . }}{{ end }}
{{- end }}

{{/* mh.containerSecurityContext is a container's security context: the
chart's (mh.securityContext) with the values' over it, called with (list
ROOT MORE). */}}
{{- define "mh.containerSecurityContext" -}}
{{- $root := index . 0 }}
{{- $more := index . 1 }}
{{- if and (kindIs "map" $more) $more }}
{{- mustMergeOverwrite (include "mh.securityContext" $root | fromYaml) (deepCopy $more) | toYaml }}
{{- else }}
{{- include "mh.securityContext" $root }}
{{- end }}
{{- end }}
