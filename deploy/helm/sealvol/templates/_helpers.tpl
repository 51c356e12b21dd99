{{/* Names. */}}
{{- define "sealvol.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sealvol.fullname" -}}
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

{{- define "sealvol.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Standard labels; pass (dict "ctx" $ "component" "registry"). */}}
{{- define "sealvol.labels" -}}
helm.sh/chart: {{ include "sealvol.chart" .ctx }}
{{ include "sealvol.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: sealvol
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "sealvol.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sealvol.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end }}

{{/* The image: REPO@DIGEST when a digest is set, else REPO:TAG. */}}
{{- define "sealvol.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "sealvol.registry.image" -}}
{{- default (include "sealvol.image" .) .Values.registry.image }}
{{- end }}

{{- define "sealvol.registry.name" -}}
{{- printf "%s-registry" (include "sealvol.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sealvol.node.name" -}}
{{- printf "%s-snapshotter" (include "sealvol.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Whether the registry runs with [tls] / [auth] ("true" or ""). */}}
{{- define "sealvol.registry.tls" -}}
{{- if .Values.registry.tls.existingSecret }}true{{ end }}
{{- end }}

{{- define "sealvol.registry.auth" -}}
{{- if or .Values.registry.auth.htpasswd.existingSecret .Values.registry.auth.token.issuer }}true{{ end }}
{{- end }}

{{/*
A TOML value from a values scalar or list: strings quoted (JSON string
escapes are TOML's), whole numbers as integers (helm reads YAML numbers as
floats), booleans, lists of those.
*/}}
{{- define "sealvol.toml" -}}
{{- $v := . }}
{{- if kindIs "string" $v }}{{ toJson $v }}
{{- else if kindIs "bool" $v }}{{ $v }}
{{- else if or (kindIs "float64" $v) (kindIs "float32" $v) }}
{{- if eq (floor $v) (float64 $v) }}{{ int64 $v }}{{ else }}{{ $v }}{{ end }}
{{- else if or (kindIs "int" $v) (kindIs "int64" $v) (kindIs "int32" $v) }}{{ $v }}
{{- else if kindIs "slice" $v }}[{{ range $i, $e := $v }}{{ if $i }}, {{ end }}{{ include "sealvol.toml" $e }}{{ end }}]
{{- else }}{{ fail (printf "registry.toml: cannot write %v (%s) as a TOML value" $v (kindOf $v)) }}
{{- end }}
{{- end }}

{{/*
Checks of the registry's values that rendering fails on: sealvol serve
listens on 0.0.0.0 in a cluster and refuses to start there without [tls]
and [auth] unless told otherwise, and replicas need shared storage.
*/}}
{{- define "sealvol.registry.validate" -}}
{{- $r := .Values.registry }}
{{- if not (has $r.mode (list "Deployment" "StaticPod")) }}
{{- fail (printf "registry.mode must be Deployment or StaticPod, not %q" $r.mode) }}
{{- end }}
{{- if eq $r.mode "Deployment" }}
{{- if and (not (include "sealvol.registry.tls" .)) (not $r.allowPlainHttp) }}
{{- fail "registry: TLS is required: sealvol serve listens on 0.0.0.0 in the cluster and refuses plain HTTP there. Set registry.tls.existingSecret to a kubernetes.io/tls Secret (tls.crt, tls.key), or registry.allowPlainHttp=true only if a proxy or ingress in front terminates TLS." }}
{{- end }}
{{- if and (not (include "sealvol.registry.auth" .)) (not $r.allowAnonymousWrites) }}
{{- fail "registry: [auth] is required: without it anyone who reaches sealvol serve may push and delete. Set registry.auth.htpasswd.existingSecret (a Secret with an `htpasswd -B` file) and registry.auth.admins, or registry.auth.token, or registry.allowAnonymousWrites=true to accept that." }}
{{- end }}
{{- if not (has $r.storage.kind (list "filesystem" "s3" "azure")) }}
{{- fail (printf "registry.storage.kind must be filesystem, s3 or azure, not %q" $r.storage.kind) }}
{{- end }}
{{- if and (ne $r.storage.kind "filesystem") (not $r.storage.bucket) }}
{{- fail (printf "registry.storage.bucket is required with storage.kind %s" $r.storage.kind) }}
{{- end }}
{{- if not (has $r.metadata.kind (list "redb" "postgres")) }}
{{- fail (printf "registry.metadata.kind must be redb or postgres, not %q" $r.metadata.kind) }}
{{- end }}
{{- if and (eq $r.metadata.kind "postgres") (not $r.metadata.url) }}
{{- fail "registry.metadata.url is required with metadata.kind postgres" }}
{{- end }}
{{- if gt (int $r.replicas) 1 }}
{{- if or (eq $r.storage.kind "filesystem") (ne $r.metadata.kind "postgres") }}
{{- fail (printf "registry.replicas=%d needs shared storage: set registry.storage.kind to s3 or azure and registry.metadata.kind to postgres (each replica's data folder is its own emptyDir; two replicas must never open one redb)" (int $r.replicas)) }}
{{- end }}
{{- if not $r.secretsKey.existingSecret }}
{{- fail "registry.replicas > 1: set registry.secretsKey.existingSecret, so that every replica seals and opens sync secrets with the same key" }}
{{- end }}
{{- if and (include "sealvol.registry.auth" .) (not $r.auth.signingKey.existingSecret) }}
{{- fail "registry.replicas > 1: set registry.auth.signingKey.existingSecret, so that a token one replica signs is valid on every replica" }}
{{- end }}
{{- end }}
{{- if lt (int $r.replicas) 0 }}
{{- fail "registry.replicas must be >= 0" }}
{{- end }}
{{- $allowed := list "request_timeout_seconds" "retention_seconds" "gc_grace_seconds" "gc_interval_seconds" "claim_ttl_seconds" "upload_ttl_seconds" "sync_workers" "sync_dir_roots" "sync_endpoints" "sync_lease_seconds" "upstream" "tag_ttl_seconds" "cache_size" }}
{{- range $k, $_ := $r.settings }}
{{- if not (has $k $allowed) }}
{{- fail (printf "registry.settings.%s is not a registry.toml key this chart writes (allowed: %s)" $k (join ", " $allowed)) }}
{{- end }}
{{- end }}
{{- range $k, $_ := $r.http }}
{{- if not (has $k (list "read_header_timeout_seconds" "idle_timeout_seconds" "max_connections")) }}
{{- fail (printf "registry.http.%s is not a key of registry.toml's [http]" $k) }}
{{- end }}
{{- end }}
{{- if and $r.auth.token.issuer (or (not $r.auth.token.jwksSecret) (not $r.auth.token.audience)) }}
{{- fail "registry.auth.token.issuer needs registry.auth.token.audience and registry.auth.token.jwksSecret (the provider's JWK set)" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (include "sealvol.registry.auth" .) (not .Values.metrics.serviceMonitor.basicAuth.existingSecret) }}
{{- fail "metrics.serviceMonitor: with [auth], /metrics needs an authenticated user: set metrics.serviceMonitor.basicAuth.existingSecret (keys username, password)" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The secret files of the registry: one entry per Secret the values name,
each projected into /etc/sealvol beside registry.toml.
*/}}
{{- define "sealvol.registry.secretFiles" -}}
{{- $r := .Values.registry }}
{{- $files := list }}
{{- with $r.tls.existingSecret }}
{{- $files = append $files (dict "secret" . "key" "tls.crt" "path" "tls.crt") }}
{{- $files = append $files (dict "secret" . "key" "tls.key" "path" "tls.key") }}
{{- end }}
{{- with $r.auth.htpasswd.existingSecret }}
{{- $files = append $files (dict "secret" . "key" $r.auth.htpasswd.key "path" "htpasswd") }}
{{- end }}
{{- with $r.auth.signingKey.existingSecret }}
{{- $files = append $files (dict "secret" . "key" $r.auth.signingKey.key "path" "token.key") }}
{{- end }}
{{- with $r.auth.token.jwksSecret }}
{{- $files = append $files (dict "secret" . "key" $r.auth.token.jwksKey "path" "jwks.json") }}
{{- end }}
{{- with $r.secretsKey.existingSecret }}
{{- $files = append $files (dict "secret" . "key" $r.secretsKey.key "path" "secrets.key") }}
{{- end }}
{{- with $r.upstreamCredentials.existingSecret }}
{{- $files = append $files (dict "secret" . "key" $r.upstreamCredentials.key "path" "upstream.credentials") }}
{{- end }}
{{- if ne $r.storage.kind "filesystem" }}
{{- with $r.storage.credentials.existingSecret }}
{{- $files = append $files (dict "secret" . "key" $r.storage.credentials.key "path" "storage.credentials") }}
{{- end }}
{{- end }}
{{- if eq $r.metadata.kind "postgres" }}
{{- with $r.metadata.password.existingSecret }}
{{- $files = append $files (dict "secret" . "key" $r.metadata.password.key "path" "pg.password") }}
{{- end }}
{{- end }}
{{- toJson $files }}
{{- end }}

{{/*
The registry container, shared by the Deployment and the static Pod.
*/}}
{{- define "sealvol.registry.container" -}}
{{- $r := .Values.registry }}
{{- $static := eq $r.mode "StaticPod" }}
{{- $https := ternary $r.staticPod.https (eq (include "sealvol.registry.tls" .) "true") $static }}
{{- $port := int $r.port }}
{{- $host := "" }}
{{- if $static }}
{{- $parts := regexSplit ":" $r.staticPod.addr -1 }}
{{- $port = int (last $parts) }}
{{- $host = trimSuffix "]" (trimPrefix "[" (join ":" (initial $parts))) }}
{{- if or (eq $host "0.0.0.0") (eq $host "::") }}{{ $host = "" }}{{ end }}
{{- end }}
- name: registry
  image: {{ include "sealvol.registry.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args:
    - serve
  {{- if $static }}
    - --addr
    - {{ $r.staticPod.addr | quote }}
    - --root
    - /var/lib/sealvol
    {{- with $r.staticPod.configFile }}
    - --config
    - {{ . | quote }}
    {{- end }}
  {{- else }}
    - --config
    - /etc/sealvol/registry.toml
  {{- end }}
  {{- if $r.allowPlainHttp }}
    # A proxy or ingress in front terminates TLS.
    - --allow-plain-http
  {{- end }}
  {{- if $r.allowAnonymousWrites }}
    - --allow-anonymous-writes
  {{- end }}
  ports:
    - name: {{ ternary "https" "http" $https }}
      containerPort: {{ $port }}
      protocol: TCP
  readinessProbe:
    httpGet:
      path: /readyz
      port: {{ ternary "https" "http" $https }}
      scheme: {{ ternary "HTTPS" "HTTP" $https }}
      {{- with $host }}
      host: {{ . | quote }}
      {{- end }}
    periodSeconds: 5
    timeoutSeconds: 3
    failureThreshold: 3
  livenessProbe:
    httpGet:
      path: /livez
      port: {{ ternary "https" "http" $https }}
      scheme: {{ ternary "HTTPS" "HTTP" $https }}
      {{- with $host }}
      host: {{ . | quote }}
      {{- end }}
    initialDelaySeconds: 5
    periodSeconds: 10
    timeoutSeconds: 5
    failureThreshold: 6
  {{- with $r.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- if $static }}
    # A static pod's data folder is a host path owned by root.
    runAsUser: 0
    runAsGroup: 0
    runAsNonRoot: false
    {{- else }}
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    {{- end }}
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    capabilities:
      drop: ["ALL"]
    seccompProfile:
      type: RuntimeDefault
  volumeMounts:
    {{- if not $static }}
    - name: config
      mountPath: /etc/sealvol
      readOnly: true
    {{- else if $r.staticPod.configFile }}
    - name: config
      mountPath: {{ dir $r.staticPod.configFile | quote }}
      readOnly: true
    {{- end }}
    - name: data
      mountPath: /var/lib/sealvol
    - name: tmp
      mountPath: /tmp
{{- end }}
