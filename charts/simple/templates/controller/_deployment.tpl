{{/*
The controller's Deployment for one role: `all` (one pod, Recreate), `api` or `reconciler`
(replicas, rolling updates, spread over nodes). Called with (dict "root" . "role" ROLE
"name" NAME "replicas" N) by deployment.yaml.
*/}}
{{- define "simple.controllerDeployment" -}}
{{- $root := .root }}
{{- $role := .role }}
{{- $ctl := $root.Values.controller }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "simple.labels" (dict "root" $root "component" "controller") | nindent 4 }}
    simple.dev/role: {{ $role }}
spec:
  {{- if eq $role "all" }}
  # One controller: its reconciler must not run twice, not even during a rollout.
  replicas: 1
  strategy:
    type: Recreate
  {{- else }}
  # {{ $role }} replicas{{ if eq $role "reconciler" }}: one leads under the Lease, the others stand by{{ end }}.
  replicas: {{ .replicas }}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 0
      maxSurge: 1
  {{- end }}
  selector:
    matchLabels:
      {{- include "simple.selectorLabels" (dict "root" $root "component" "controller") | nindent 6 }}
      {{- if ne $role "all" }}
      simple.dev/role: {{ $role }}
      {{- end }}
  template:
    metadata:
      labels:
        {{- include "simple.labels" (dict "root" $root "component" "controller") | nindent 8 }}
        simple.dev/role: {{ $role }}
        {{- with $ctl.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        # Roll the pod when its Secret or catalog changes.
        checksum/secret: {{ include (print $root.Template.BasePath "/controller/secret.yaml") $root | sha256sum }}
        checksum/catalog: {{ include (print $root.Template.BasePath "/controller/configmap-catalog.yaml") $root | sha256sum }}
        {{- if $root.Values.metrics.scrapeAnnotations }}
        prometheus.io/scrape: "true"
        prometheus.io/port: "8080"
        prometheus.io/path: /metrics
        {{- end }}
        {{- with $ctl.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "simple.controllerServiceAccountName" $root }}
      # The controller creates Jobs through the API: it needs its token (and nothing else does).
      automountServiceAccountToken: true
      enableServiceLinks: false
      {{- with $ctl.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $ctl.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        {{- toYaml $ctl.podSecurityContext | nindent 8 }}
      {{- if $ctl.migrations.enabled }}
      initContainers:
        - name: db-upgrade
          image: {{ include "simple.image" (dict "image" $ctl.image "root" $root) }}
          imagePullPolicy: {{ $ctl.image.pullPolicy }}
          command: ["simplectl", "db", "upgrade", "--wait", "120"]
          env:
            {{- include "simple.controllerEnv" $root | nindent 12 }}
          resources:
            {{- toYaml $ctl.resources | nindent 12 }}
          securityContext:
            {{- toYaml $ctl.securityContext | nindent 12 }}
          volumeMounts:
            {{- include "simple.controllerVolumeMounts" $root | nindent 12 }}
      {{- end }}
      containers:
        - name: controller
          image: {{ include "simple.image" (dict "image" $ctl.image "root" $root) }}
          imagePullPolicy: {{ $ctl.image.pullPolicy }}
          command: ["simplectl", "serve", "--host", "0.0.0.0", "--port", "8080", "--role", {{ $role | quote }}]
          ports:
            - name: http
              containerPort: 8080
              protocol: TCP
          env:
            {{- include "simple.controllerEnv" $root | nindent 12 }}
            {{- include "simple.roleEnv" (dict "root" $root "role" $role) | nindent 12 }}
          startupProbe:
            httpGet:
              path: /healthz
              port: http
            periodSeconds: 5
            failureThreshold: 60
          livenessProbe:
            httpGet:
              path: /healthz
              port: http
            periodSeconds: 10
            timeoutSeconds: 5
            failureThreshold: 3
          readinessProbe:
            httpGet:
              path: /readyz
              port: http
            periodSeconds: 5
            timeoutSeconds: 5
            failureThreshold: 3
          resources:
            {{- toYaml $ctl.resources | nindent 12 }}
          securityContext:
            {{- toYaml $ctl.securityContext | nindent 12 }}
          volumeMounts:
            {{- include "simple.controllerVolumeMounts" $root | nindent 12 }}
      volumes:
        {{- include "simple.controllerSecretsVolume" $root | nindent 8 }}
        - name: tmp
          emptyDir: {}
        - name: data
          {{- if and $ctl.persistence.enabled (eq $role "all") }}
          persistentVolumeClaim:
            claimName: {{ include "simple.componentName" (dict "root" $root "suffix" "data") }}
          {{- else }}
          emptyDir: {}
          {{- end }}
        {{- if $root.Values.catalog.extraTemplates }}
        - name: catalog
          configMap:
            name: {{ include "simple.componentName" (dict "root" $root "suffix" "catalog") }}
        {{- end }}
      {{- with $ctl.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $ctl.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if $ctl.affinity }}
      affinity:
        {{- toYaml $ctl.affinity | nindent 8 }}
      {{- else if and (ne $role "all") (ne $ctl.highAvailability.antiAffinity "none") }}
      # Replicas of one role on different nodes, so one node's loss leaves the role standing.
      affinity:
        podAntiAffinity:
          {{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (dict "app.kubernetes.io/instance" ($root.Release.Name | trunc 63 | trimSuffix "-") "app.kubernetes.io/component" "controller" "simple.dev/role" $role)) }}
          {{- if eq $ctl.highAvailability.antiAffinity "hard" }}
          requiredDuringSchedulingIgnoredDuringExecution:
            {{- toYaml (list $term) | nindent 12 }}
          {{- else }}
          preferredDuringSchedulingIgnoredDuringExecution:
            {{- toYaml (list (dict "weight" 100 "podAffinityTerm" $term)) | nindent 12 }}
          {{- end }}
      {{- end }}
{{- end }}
