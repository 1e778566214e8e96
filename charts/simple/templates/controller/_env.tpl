{{/* The controller's environment and mounts, shared by its initContainer and container. */}}

{{- define "simple.controllerVolumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: data
  mountPath: /var/lib/simple
- name: secrets
  mountPath: {{ include "simple.controllerSecretsDir" . }}
  readOnly: true
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
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- $name := include "simple.fullname" . }}
- name: SIMPLE_ALLOWED_HOSTS
  value: {{ join "," (concat (list "$(POD_IP)" $name (printf "%s.$(SIMPLE_KUBERNETES_NAMESPACE)" $name) (printf "%s.$(SIMPLE_KUBERNETES_NAMESPACE).svc" $name)) ($settings.allowedHosts | default list)) | quote }}
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
# Credentials (API tokens, database URL, S3 keys) are files in this directory, the
# "secrets" volume below, never environment variables.
- name: SIMPLE_SECRETS_DIR
  value: {{ include "simple.controllerSecretsDir" . | quote }}
{{- with .Values.controller.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "simple.controllerSecretsDir" -}}
/var/run/secrets/simple
{{- end }}

{{/*
The controller's credentials as one projected volume: each Secret key becomes a file named
like the SIMPLE_* setting it holds, which the controller reads from SIMPLE_SECRETS_DIR.
*/}}
{{- define "simple.controllerSecretsVolume" -}}
- name: secrets
  projected:
    defaultMode: 0440
    sources:
      - secret:
          {{- $tokens := include "simple.apiTokensSecretRef" . | fromYaml }}
          name: {{ $tokens.name }}
          items:
            - key: {{ $tokens.key }}
              path: SIMPLE_API_TOKENS
      {{- if .Values.database.existingSecret }}
      - secret:
          name: {{ .Values.database.existingSecret }}
          items:
            - key: {{ .Values.database.existingSecretKey }}
              path: SIMPLE_DATABASE_URL
      {{- else if include "simple.databaseUrl" . }}
      - secret:
          name: {{ include "simple.secretName" . }}
          items:
            - key: database-url
              path: SIMPLE_DATABASE_URL
      {{- end }}
      {{- if .Values.s3.existingSecret }}
      - secret:
          name: {{ .Values.s3.existingSecret }}
          items:
            - key: {{ .Values.s3.accessKeyIdKey }}
              path: SIMPLE_S3_ACCESS_KEY_ID
            - key: {{ .Values.s3.secretAccessKeyKey }}
              path: SIMPLE_S3_SECRET_ACCESS_KEY
      {{- else if include "simple.s3AccessKeyId" . }}
      - secret:
          name: {{ include "simple.secretName" . }}
          items:
            - key: s3-access-key-id
              path: SIMPLE_S3_ACCESS_KEY_ID
            - key: s3-secret-access-key
              path: SIMPLE_S3_SECRET_ACCESS_KEY
      {{- end }}
      {{- if include "simple.split" . }}
      {{- $signing := .Values.controller.highAvailability.signingKey }}
      - secret:
          name: {{ $signing.existingSecret | default (include "simple.secretName" .) }}
          items:
            - key: {{ if $signing.existingSecret }}{{ $signing.existingSecretKey }}{{ else }}signing-key{{ end }}
              path: SIMPLE_SIGNING_KEY
      {{- end }}
{{- end }}
