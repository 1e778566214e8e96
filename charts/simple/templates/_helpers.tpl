{{/*
Names and labels. Every name is truncated to 63 characters (the DNS label limit), and so
is every label value; component names keep their suffix by truncating the prefix.
*/}}

{{- define "simple.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "simple.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"<fullname>-<suffix>", at most 63 characters (or `max`): the prefix gives way, not the
suffix. StatefulSets pass max 52, as their pods' controller-revision-hash label appends 11.
*/}}
{{- define "simple.componentName" -}}
{{- $suffix := .suffix }}
{{- $max := .max | default 63 | int }}
{{- $prefix := include "simple.fullname" .root | trunc (int (sub (sub $max 1) (len $suffix))) | trimSuffix "-" }}
{{- printf "%s-%s" $prefix $suffix }}
{{- end }}

{{- define "simple.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every resource; `component` is passed in the dict. */}}
{{- define "simple.labels" -}}
helm.sh/chart: {{ include "simple.chart" .root }}
{{ include "simple.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: simple
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "simple.selectorLabels" -}}
app.kubernetes.io/name: {{ include "simple.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "simple.controllerServiceAccountName" -}}
{{- if .Values.controller.serviceAccount.create }}
{{- default (include "simple.fullname" .) .Values.controller.serviceAccount.name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- default "default" .Values.controller.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "simple.sandboxServiceAccountName" -}}
{{- if .Values.sandbox.serviceAccount.name }}
{{- .Values.sandbox.serviceAccount.name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- include "simple.componentName" (dict "root" . "suffix" "sandbox") }}
{{- end }}
{{- end }}

{{/*
The admission policy and its binding are cluster-scoped: their name carries the release's
namespace too, so two releases in two namespaces do not collide.
*/}}
{{- define "simple.admissionPolicyName" -}}
{{- $prefix := printf "%s-%s" (include "simple.fullname" .) .Release.Namespace | trunc 52 | trimSuffix "-" }}
{{- printf "%s-hardening" $prefix }}
{{- end }}

{{/* An image; without a tag, the chart's appVersion (never `latest`). */}}
{{- define "simple.image" -}}
{{- printf "%s:%s" .image.repository (toString (.image.tag | default .root.Chart.AppVersion)) }}
{{- end }}

{{/*
Credentials. Each resolves to a Secret and a key: an existing Secret when one is named,
else the chart's own Secret "<fullname>" when the value is given inline (or comes from
the evaluation services), else nothing (API tokens: the Secret "<fullname>-api-tokens"
that the operator creates, because the controller refuses to serve without tokens).
*/}}
{{- define "simple.secretName" -}}
{{- include "simple.fullname" . }}
{{- end }}

{{/*
A generated secret value (evaluation installs): `given` if set, else what the release's
Secret `secret` already holds under `key` (kept across upgrades, with `lookup`), else 32
random characters, generated once per render so every template sees the same value.
*/}}
{{- define "simple.generatedSecret" -}}
{{- if .given -}}
{{- .given -}}
{{- else -}}
{{- $cache := .root.Values.evaluation -}}
{{- $slot := printf "_generated_%s_%s" .secret .key -}}
{{- if not (hasKey $cache $slot) -}}
{{- $existing := lookup "v1" "Secret" .root.Release.Namespace .secret -}}
{{- $value := randAlphaNum 32 -}}
{{- if and $existing $existing.data (hasKey $existing.data .key) -}}
{{- $value = index $existing.data .key | b64dec -}}
{{- end -}}
{{- $_ := set $cache $slot $value -}}
{{- end -}}
{{- index $cache $slot -}}
{{- end -}}
{{- end }}

{{- define "simple.evaluationPassword" -}}
{{- $secret := include "simple.componentName" (dict "root" .root "suffix" "evaluation") -}}
{{- include "simple.generatedSecret" (dict "root" .root "secret" $secret "key" .key "given" .given) -}}
{{- end }}

{{- define "simple.postgresPassword" -}}
{{- include "simple.evaluationPassword" (dict "root" . "key" "postgres-password" "given" .Values.evaluation.postgresql.password) -}}
{{- end }}

{{- define "simple.minioPassword" -}}
{{- include "simple.evaluationPassword" (dict "root" . "key" "minio-root-password" "given" .Values.evaluation.minio.rootPassword) -}}
{{- end }}

{{- define "simple.databaseUrl" -}}
{{- if .Values.database.url }}
{{- .Values.database.url }}
{{- else if .Values.evaluation.enabled }}
{{- $pg := .Values.evaluation.postgresql }}
{{- printf "postgresql+psycopg://%s:%s@%s:5432/%s" (urlquery $pg.user) (urlquery (include "simple.postgresPassword" .)) (include "simple.componentName" (dict "root" . "suffix" "postgresql" "max" 52)) $pg.database }}
{{- end }}
{{- end }}

{{- define "simple.s3AccessKeyId" -}}
{{- if .Values.s3.accessKeyId }}{{ .Values.s3.accessKeyId }}{{ else if .Values.evaluation.enabled }}{{ .Values.evaluation.minio.rootUser }}{{ end }}
{{- end }}

{{- define "simple.s3SecretAccessKey" -}}
{{- if .Values.s3.secretAccessKey }}{{ .Values.s3.secretAccessKey }}{{ else if .Values.evaluation.enabled }}{{ include "simple.minioPassword" . }}{{ end }}
{{- end }}

{{/* Whether the chart's own Secret has anything to hold. */}}
{{- define "simple.ownSecretNeeded" -}}
{{- $tokens := and (not .Values.auth.existingSecret) (or .Values.auth.apiTokens .Values.evaluation.enabled) }}
{{- $db := and (not .Values.database.existingSecret) (include "simple.databaseUrl" .) }}
{{- $s3 := and (not .Values.s3.existingSecret) (include "simple.s3AccessKeyId" .) }}
{{- $signing := and (include "simple.split" .) (not .Values.controller.highAvailability.signingKey.existingSecret) }}
{{- if or $tokens $db $s3 $signing }}true{{ end }}
{{- end }}

{{- define "simple.apiTokensSecretRef" -}}
{{- if .Values.auth.existingSecret -}}
name: {{ .Values.auth.existingSecret }}
key: {{ .Values.auth.existingSecretKey }}
{{- else if or .Values.auth.apiTokens .Values.evaluation.enabled -}}
name: {{ include "simple.secretName" . }}
key: api-tokens
{{- else -}}
name: {{ include "simple.componentName" (dict "root" . "suffix" "api-tokens") }}
key: api-tokens
{{- end }}
{{- end }}

{{- define "simple.storeUrl" -}}
{{- if .Values.store.url }}
{{- .Values.store.url }}
{{- else if .Values.evaluation.enabled }}
{{- printf "s3://%s/snapshots" .Values.evaluation.minio.bucket }}
{{- else -}}
file:///var/lib/simple/store
{{- end }}
{{- end }}

{{/* The S3 endpoint; $(SIMPLE_KUBERNETES_NAMESPACE) is expanded by the kubelet. */}}
{{- define "simple.s3EndpointUrl" -}}
{{- if .Values.s3.endpointUrl }}
{{- .Values.s3.endpointUrl }}
{{- else if .Values.evaluation.enabled }}
{{- printf "http://%s.$(SIMPLE_KUBERNETES_NAMESPACE).svc.%s:9000" (include "simple.componentName" (dict "root" . "suffix" "minio" "max" 52)) .Values.clusterDomain }}
{{- end }}
{{- end }}

{{/*
"true" when the controller splits into API and reconciler Deployments: asked for, or
`auto` with PostgreSQL and an S3 store (what several pods can share). Forcing it without
both is refused: a split controller on SQLite or a file store would lose data.
*/}}
{{- define "simple.split" -}}
{{- $asked := .Values.controller.highAvailability.enabled }}
{{- $db := or .Values.database.existingSecret (hasPrefix "postgresql" (include "simple.databaseUrl" .)) }}
{{- $s3 := hasPrefix "s3://" (include "simple.storeUrl" .) }}
{{- if eq (toString $asked) "true" }}
{{- if not (and $db $s3) }}
{{- fail "controller.highAvailability.enabled=true needs PostgreSQL (database.url or database.existingSecret) and an S3 store (store.url s3://…)" }}
{{- end }}
{{- true }}
{{- else if and (eq (toString $asked) "auto") $db $s3 }}
{{- true }}
{{- end }}
{{- end }}

{{/* What a role adds to the controller's environment. */}}
{{- define "simple.roleEnv" -}}
{{- $ha := .root.Values.controller.highAvailability }}
- name: SIMPLE_ROLE
  value: {{ .role | quote }}
{{- if eq .role "reconciler" }}
# Reconcilers contend for a coordination.k8s.io/v1 Lease named after the release, held
# under the pod's name; its epoch fences every write (docs/high-availability.md).
- name: SIMPLE_LEASE_BACKEND
  value: kubernetes
- name: SIMPLE_LEASE_NAME
  value: {{ include "simple.componentName" (dict "root" .root "suffix" "reconciler") | quote }}
- name: SIMPLE_HOLDER_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: SIMPLE_LEASE_DURATION_S
  value: {{ $ha.lease.durationSeconds | quote }}
- name: SIMPLE_LEASE_RENEW_DEADLINE_S
  value: {{ $ha.lease.renewDeadlineSeconds | quote }}
- name: SIMPLE_LEASE_RETRY_S
  value: {{ $ha.lease.retrySeconds | quote }}
{{- end }}
{{- end }}

{{/* The URL-signing key all controller pods share when split (kept across upgrades). */}}
{{- define "simple.signingKey" -}}
{{- include "simple.generatedSecret" (dict "root" . "secret" (include "simple.secretName" .) "key" "signing-key" "given" "") -}}
{{- end }}
