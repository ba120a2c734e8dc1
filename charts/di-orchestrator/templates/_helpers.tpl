{{/*
The objects keep the names of manifests/install: the orchestrator's defaults (Lease, Secret and
webhook configuration names) and its RBAC resourceNames depend on them.
*/}}
{{- define "di-orchestrator.name" -}}
di-orchestrator
{{- end }}

{{/* The namespace the orchestrator runs in (a value, not the release namespace). */}}
{{- define "di-orchestrator.namespace" -}}
{{- required "namespace.name must be set" .Values.namespace.name -}}
{{- end }}

{{- define "di-orchestrator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/* Selector labels: as in manifests/install, so the Deployment's selector stays the same. */}}
{{- define "di-orchestrator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "di-orchestrator.name" . }}
{{- end }}

{{- define "di-orchestrator.labels" -}}
{{ include "di-orchestrator.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "di-orchestrator.chart" . }}
{{- end }}

{{- define "di-orchestrator.image" -}}
{{- printf "%s:%s" .Values.image.repository (toString (.Values.image.tag | default .Chart.AppVersion)) -}}
{{- end }}

{{/* The replica endpoint sidecar is the same binary: the same image unless replicasImage is set. */}}
{{- define "di-orchestrator.replicasImage" -}}
{{- .Values.replicasImage | default (include "di-orchestrator.image" .) -}}
{{- end }}

{{- define "di-orchestrator.webhookService" -}}
di-orchestrator-webhook
{{- end }}

{{/* The webhook Service's DNS names, comma-separated. */}}
{{- define "di-orchestrator.webhookHosts" -}}
{{- $svc := printf "%s.%s.svc" (include "di-orchestrator.webhookService" .) (include "di-orchestrator.namespace" .) -}}
{{- printf "%s,%s.%s" $svc $svc (required "clusterDomain must be set" .Values.clusterDomain) -}}
{{- end }}

{{/* "true" when cert-manager provides the webhook's certificate. */}}
{{- define "di-orchestrator.certManager" -}}
{{- if and .Values.webhook.enabled (eq .Values.webhook.certificates.mode "cert-manager") }}true{{ end -}}
{{- end }}

{{/* "true" when the orchestrator manages the webhook's certificates itself. */}}
{{- define "di-orchestrator.selfManaged" -}}
{{- if and .Values.webhook.enabled (eq .Values.webhook.certificates.mode "self-managed") }}true{{ end -}}
{{- end }}

{{- define "di-orchestrator.certificate" -}}
di-orchestrator-webhook
{{- end }}

{{- define "di-orchestrator.certificateSecret" -}}
di-orchestrator-webhook-tls
{{- end }}

{{- define "di-orchestrator.tlsDir" -}}
/etc/di-orchestrator/tls
{{- end }}

{{- define "di-orchestrator.defaultAggregatorConfig" -}}
{{- .Values.defaultAggregatorConfig | default (printf "%s/aggregator-config" (include "di-orchestrator.namespace" .)) -}}
{{- end }}

{{/* Combinations the orchestrator cannot run with: refused before anything is installed. */}}
{{- define "di-orchestrator.validate" -}}
{{- $mode := .Values.webhook.certificates.mode -}}
{{- if not (has $mode (list "self-managed" "cert-manager")) -}}
{{- fail (printf "webhook.certificates.mode must be \"self-managed\" or \"cert-manager\", not %q" (toString $mode)) -}}
{{- end -}}
{{- if and (not .Values.leaderElection.enabled) (gt (int .Values.replicaCount) 1) -}}
{{- fail (printf "leaderElection.enabled=false allows one replica only, but replicaCount is %d: set replicaCount=1 (or enable leader election), or replicas would reconcile the same jobs at once" (int .Values.replicaCount)) -}}
{{- end -}}
{{- end }}

{{/*
What reconciling jobs takes: cluster-wide by default, in watchNamespace's Role when it is set.
When set, aggregatorconfigs are granted cluster-wide instead (see rbac.yaml).
*/}}
{{- define "di-orchestrator.jobRules" }}
- apiGroups: ["diengine.opendilab.org"]
  resources: ["dijobs"]
  # delete: a finished job's TTL.
  verbs: ["get", "list", "watch", "patch", "delete"]
- apiGroups: ["diengine.opendilab.org"]
  resources: ["dijobs/status"]
  # Written by server-side apply, never read: the job is watched.
  verbs: ["patch"]
# Every object of a job names the job as its controller with blockOwnerDeletion; the admission
# plugin OwnerReferencesPermissionEnforcement (on in OpenShift) allows that only to whoever may
# update the job's finalizers.
- apiGroups: ["diengine.opendilab.org"]
  resources: ["dijobs/finalizers"]
  verbs: ["update"]
{{- if not .Values.watchNamespace }}
- apiGroups: ["diengine.opendilab.org"]
  resources: ["aggregatorconfigs"]
  # Cached whole: read from the watch, never one by one.
  verbs: ["list", "watch"]
{{- end }}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: [""]
  resources: ["services"]
  # patch: a replica's restart count lives in its Service's annotations. get: only when a
  # create finds the name taken, to see whether the Service there is the job's (the watch sees
  # only what the orchestrator labels).
  verbs: ["get", "list", "watch", "create", "delete", "patch"]
# get: one that exists already must be the job's own, not a deleted namesake's.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "create", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "create", "delete"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# Gangs' PodGroups, of whichever scheduler --gang-scheduler names: applied (server-side) before
# their pods, deleted with a logic learner scaled away; the rest go with their job.
- apiGroups: ["scheduling.k8s.io", "scheduling.x-k8s.io", "scheduling.volcano.sh"]
  resources: ["podgroups"]
  verbs: ["create", "patch", "delete"]
# The core's PodDisruptionBudget of a job with spec.protectCore: applied (server-side) before its
# core pods; given up (read for its owner, then deleted) when the job finishes.
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["create", "patch", "get", "delete"]
# Kueue: the Workload of each job in a queue (made, watched, made anew when the job changed size
# while it waited, made inactive while the job is suspended, its status written with what the
# job's pods do).
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads/status"]
  verbs: ["update"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["localqueues"]
  verbs: ["list", "watch"]
{{- end }}

{{/* One admission webhook, after its name; takes (dict "root" $ "path" "/mutate"). */}}
{{- define "di-orchestrator.webhook" -}}
{{- $root := .root -}}
admissionReviewVersions: ["v1"]
sideEffects: None
failurePolicy: {{ $root.Values.webhook.failurePolicy }}
timeoutSeconds: {{ int $root.Values.webhook.timeoutSeconds }}
matchPolicy: Equivalent
clientConfig:
  service:
    namespace: {{ include "di-orchestrator.namespace" $root }}
    name: {{ include "di-orchestrator.webhookService" $root }}
    path: {{ .path }}
    port: 443
{{- with $root.Values.watchNamespace }}
# The watched namespace's objects only, and the orchestrator's own namespace's, where the default
# AggregatorConfig lives: the other namespaces' DIJobs are no one's to default or check.
namespaceSelector:
  matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: In
    values:
    {{- range uniq (list . (include "di-orchestrator.namespace" $root)) }}
    - {{ . }}
    {{- end }}
{{- end }}
rules:
- apiGroups: ["diengine.opendilab.org"]
  apiVersions: ["v1alpha1", "v2alpha1"]
  operations: ["CREATE", "UPDATE"]
  resources: ["dijobs", "aggregatorconfigs"]
  scope: Namespaced
{{- end }}
