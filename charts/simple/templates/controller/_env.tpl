{{/* The controller's environment and mounts, shared by its initContainer and container. */}}

{{- define "simple.controllerVolumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: data
  mountPath: /var/lib/simple
{{- if .Values.catalog.extraTemplates }}
- name: catalog
  mountPath: {{ .Values.catalog.mountPath }}
  readOnly: true
{{- end }}
{{- end }}

{{- define "simple.controllerEnv" -}}
{{- $settings := .Values.controller.settings -}}
- name: SIMPLE_BACKEND
  value: kubernetes
# The namespace is read from the pod, so kustomize can move the plain manifests (k8s/).
- name: SIMPLE_KUBERNETES_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: SIMPLE_KUBERNETES_SANDBOX_SERVICE_ACCOUNT
  value: {{ include "simple.sandboxServiceAccountName" . | quote }}
- name: SIMPLE_KUBERNETES_JOB_TTL_S
  value: {{ .Values.sandbox.jobTtlSeconds | quote }}
- name: SIMPLE_CONTROLLER_URL
  value: {{ printf "http://%s.$(SIMPLE_KUBERNETES_NAMESPACE).svc.%s:%v" (include "simple.fullname" .) .Values.clusterDomain .Values.service.port | quote }}
- name: SIMPLE_HOST
  value: "0.0.0.0"
- name: SIMPLE_PORT
  value: "8080"
- name: SIMPLE_DATA_DIR
  value: /var/lib/simple
- name: SIMPLE_STORE_URL
  value: {{ include "simple.storeUrl" . | quote }}
{{- with include "simple.s3EndpointUrl" . }}
- name: SIMPLE_S3_ENDPOINT_URL
  value: {{ . | quote }}
{{- end }}
- name: SIMPLE_S3_REGION
  value: {{ .Values.s3.region | quote }}
- name: SIMPLE_DEFAULT_IMAGE
  value: {{ $settings.defaultImage | default (printf "simple-sandbox:%s" .Chart.AppVersion) | quote }}
- name: SIMPLE_MAX_ATTEMPTS
  value: {{ $settings.maxAttempts | quote }}
- name: SIMPLE_RETRY_BASE_S
  value: {{ $settings.retryBaseS | quote }}
- name: SIMPLE_RETRY_MAX_S
  value: {{ $settings.retryMaxS | quote }}
- name: SIMPLE_RECONCILE_INTERVAL_S
  value: {{ $settings.reconcileIntervalS | quote }}
- name: SIMPLE_LOST_GRACE_S
  value: {{ $settings.lostGraceS | quote }}
- name: SIMPLE_SNAPSHOT_MAX_BYTES
  value: {{ $settings.snapshotMaxBytes | int64 | quote }}
{{- if .Values.catalog.extraTemplates }}
- name: SIMPLE_CATALOG_DIRS
  value: {{ .Values.catalog.mountPath | quote }}
{{- end }}
- name: SIMPLE_API_TOKENS
  valueFrom:
    secretKeyRef:
      {{- include "simple.apiTokensSecretRef" . | nindent 6 }}
{{- if .Values.database.existingSecret }}
- name: SIMPLE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.existingSecret }}
      key: {{ .Values.database.existingSecretKey }}
{{- else if include "simple.databaseUrl" . }}
- name: SIMPLE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "simple.secretName" . }}
      key: database-url
{{- end }}
{{- if .Values.s3.existingSecret }}
- name: SIMPLE_S3_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ .Values.s3.existingSecret }}
      key: {{ .Values.s3.accessKeyIdKey }}
- name: SIMPLE_S3_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.s3.existingSecret }}
      key: {{ .Values.s3.secretAccessKeyKey }}
{{- else if include "simple.s3AccessKeyId" . }}
- name: SIMPLE_S3_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ include "simple.secretName" . }}
      key: s3-access-key-id
- name: SIMPLE_S3_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "simple.secretName" . }}
      key: s3-secret-access-key
{{- end }}
{{- with .Values.controller.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}
