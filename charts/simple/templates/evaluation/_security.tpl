{{/*
Restricted Pod Security Standard for the evaluation services, as uid/gid `.id`: a high id
(10000+, clear of the node's own users) of their own, so no two services share one. The
images need no passwd entry for it (PostgreSQL's entrypoint uses nss_wrapper).
*/}}
{{- define "simple.evaluationPodSecurity" -}}
runAsNonRoot: true
runAsUser: {{ .id }}
runAsGroup: {{ .id }}
fsGroup: {{ .id }}
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "simple.evaluationContainerSecurity" -}}
allowPrivilegeEscalation: false
capabilities:
  drop: [ALL]
privileged: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: {{ .id }}
runAsGroup: {{ .id }}
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The data volume: an emptyDir, or a claim template when evaluation.persistence is on. */}}
{{- define "simple.evaluationClaims" -}}
{{- $p := .Values.evaluation.persistence }}
{{- if $p.enabled }}
volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      accessModes: [ReadWriteOnce]
      {{- with $p.storageClass }}
      storageClassName: {{ . }}
      {{- end }}
      resources:
        requests:
          storage: {{ $p.size }}
{{- end }}
{{- end }}

{{/* MinIO's root credentials as files, for MinIO and the bucket Job. */}}
{{- define "simple.minioCredentialsVolume" -}}
- name: credentials
  secret:
    secretName: {{ include "simple.componentName" (dict "root" . "suffix" "evaluation") }}
    defaultMode: 0440
    items:
      - key: minio-root-user
        path: root-user
      - key: minio-root-password
        path: root-password
{{- end }}
