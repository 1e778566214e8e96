{{/* Restricted Pod Security Standard for the evaluation services, as uid/gid `.id`. */}}
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
