{{/* Names, labels and the derived values every template shares. */}}

{{- define "bulkhead.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "bulkhead" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-bulkhead" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "bulkhead.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* Labels of every object; "component" names the node (edge, prefill, ...). */}}
{{- define "bulkhead.labels" -}}
app.kubernetes.io/name: bulkhead
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/component: {{ .component }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/* The labels that select one component's pods (Services, PDBs). */}}
{{- define "bulkhead.selector" -}}
app.kubernetes.io/name: bulkhead
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/*
bus.url, bus.monitoringEndpoint and externalRedis are rendered with tpl, so
that a parent chart (deploy/helm/bulkhead-stack) can name services of its
release: "nats://{{ .Release.Name }}-nats.{{ .Release.Namespace }}.svc:4222".
*/}}
{{- define "bulkhead.natsURL" -}}
{{- tpl (required "bus.url: the NATS URL is required (your NATS 2.10+ with JetStream, e.g. nats://nats.nats.svc:4222; deploy/helm/bulkhead-stack installs one with Bulkhead)" .Values.bus.url) . -}}
{{- end -}}

{{- define "bulkhead.natsMonitoring" -}}
{{- tpl (required "bus.monitoringEndpoint: KEDA reads consumer lag from NATS's monitoring endpoint (host:8222)" .Values.bus.monitoringEndpoint) . -}}
{{- end -}}

{{/*
queue.ModelToken: the model name lowered, every character outside
[a-z0-9_-] replaced by "_", trimmed of "_", then "-" and the first 8 hex
digits of the name's SHA-256. The chart's tests compare it with the Go
function for every model they render.
*/}}
{{- define "bulkhead.modelToken" -}}
{{- printf "%s-%s" (trimAll "_" (regexReplaceAll "[^a-z0-9_-]" (lower .) "_")) (sha256sum . | trunc 8) -}}
{{- end -}}

{{/* The pool's KV bytes for one model (see values.yaml: models). */}}
{{- define "bulkhead.kvBytes" -}}
{{- $tokens := int64 (.kvPoolTokens | default .contextWindow) -}}
{{- $pages := div (add $tokens 15) 16 -}}
{{- mul $pages 16 4 (int64 .layers) (int64 .kvHeads) (int64 .headDim) -}}
{{- end -}}

{{/*
A worker's memory request in MiB, rounded up: every model's weights and KV
pool, plus the overhead. It also checks each model's sizing values.
*/}}
{{- define "bulkhead.workerMemoryMiB" -}}
{{- $total := int64 .Values.workers.memoryOverheadBytes -}}
{{- range $i, $m := .Values.models -}}
{{- range $field := list "fileBytes" "layers" "kvHeads" "headDim" "contextWindow" -}}
{{- if le (int64 (index $m $field | default 0)) 0 -}}
{{- fail (printf "models[%d].%s: a positive number is required (it sizes the worker's memory request)" $i $field) -}}
{{- end -}}
{{- end -}}
{{- $total = add $total (int64 $m.fileBytes) (include "bulkhead.kvBytes" $m | int64) -}}
{{- end -}}
{{- div (add $total 1048575) 1048576 -}}
{{- end -}}

{{/* The catalog every edge and worker loads (models/catalog's format). */}}
{{- define "bulkhead.catalog" -}}
{{- $models := list -}}
{{- range $i, $m := .Values.models -}}
{{- if not $m.name -}}{{- fail (printf "models[%d].name is required" $i) -}}{{- end -}}
{{- if not $m.file -}}{{- fail (printf "models[%d].file is required" $i) -}}{{- end -}}
{{- $tokens := int64 ($m.kvPoolTokens | default $m.contextWindow) -}}
{{- if and (lt $tokens (int64 $m.contextWindow)) (not $.Values.workers.clampContext) -}}
{{- fail (printf "models[%d] (%s): kvPoolTokens %d cannot hold one request at contextWindow %d; enlarge the pool, lower the window or set workers.clampContext (invariant 5)" $i $m.name $tokens (int64 $m.contextWindow)) -}}
{{- end -}}
{{- $e := dict "name" $m.name "path" (printf "%s/%s" (trimSuffix "/" $.Values.modelStore.mountPath) $m.file) "context_window" (int64 $m.contextWindow) "kv_pool_tokens" $tokens -}}
{{- with $m.description -}}{{- $_ := set $e "description" . -}}{{- end -}}
{{- with $m.properties -}}{{- $_ := set $e "properties" . -}}{{- end -}}
{{- with $m.prices -}}
{{- $p := dict -}}
{{- if hasKey . "prompt" -}}{{- $_ := set $p "neurons_per_m_prompt_tokens" .prompt -}}{{- end -}}
{{- if hasKey . "completion" -}}{{- $_ := set $p "neurons_per_m_completion_tokens" .completion -}}{{- end -}}
{{- $_ := set $e "prices" $p -}}
{{- end -}}
{{- $models = append $models $e -}}
{{- end -}}
{{- if not $models -}}{{- fail "models: at least one model is required" -}}{{- end -}}
{{- toYaml (dict "models" $models) -}}
{{- end -}}

{{/* terminationGracePeriodSeconds: preStop pause + drain grace + margin. */}}
{{- define "bulkhead.grace" -}}
{{- add (int64 (.preStop | default 0)) (int64 .root.Values.drainGraceSeconds) (int64 .root.Values.terminationMarginSeconds) -}}
{{- end -}}

{{/*
Replicas of the streams and buckets a node creates when they are missing
(the first node to start sets them up): bus.streamReplicas, at least 1.
*/}}
{{- define "bulkhead.streamReplicas" -}}
{{- max (int64 (.Values.bus.streamReplicas | default 1)) 1 -}}
{{- end -}}

{{/* Connection flags every node shares: the bus, its credentials and TLS. */}}
{{- define "bulkhead.natsArgs" -}}
- --nats={{ include "bulkhead.natsURL" .root }}
- --replicas={{ include "bulkhead.streamReplicas" .root }}
{{- if .root.Values.bus.credentials.existingSecret }}
- --nats-creds=/run/bulkhead/nats/{{ .role }}.nk
{{- end }}
{{- if .root.Values.bus.tls.existingSecret }}
- --nats-tls-ca=/etc/bulkhead/nats-tls/ca.crt
{{- if .root.Values.bus.tls.clientCertificate }}
- --nats-tls-cert=/etc/bulkhead/nats-tls/tls.crt
- --nats-tls-key=/etc/bulkhead/nats-tls/tls.key
{{- end }}
{{- end }}
- --log-format=json
- --log-level={{ .root.Values.logLevel }}
{{- end -}}

{{/* The init container that copies the role's seed into memory, 0600. */}}
{{- define "bulkhead.credsInit" -}}
{{- if .root.Values.bus.credentials.existingSecret }}
- name: nats-credentials
  image: {{ .root.Values.bus.credentials.initImage }}
  command: ["sh", "-c", "cp /etc/bulkhead/nats-seeds/{{ .role }}.nk /run/bulkhead/nats/{{ .role }}.nk && chmod 0600 /run/bulkhead/nats/{{ .role }}.nk"]
  securityContext:
    {{- toYaml .root.Values.containerSecurityContext | nindent 4 }}
  resources:
    requests:
      cpu: 10m
      memory: 16Mi
    limits:
      memory: 32Mi
  volumeMounts:
    - name: nats-seeds
      mountPath: /etc/bulkhead/nats-seeds
      readOnly: true
    - name: nats-creds
      mountPath: /run/bulkhead/nats
{{- end }}
{{- end -}}

{{- define "bulkhead.natsMounts" -}}
{{- if .Values.bus.credentials.existingSecret }}
- name: nats-creds
  mountPath: /run/bulkhead/nats
  readOnly: true
{{- end }}
{{- if .Values.bus.tls.existingSecret }}
- name: nats-tls
  mountPath: /etc/bulkhead/nats-tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "bulkhead.natsVolumes" -}}
{{- if .root.Values.bus.credentials.existingSecret }}
- name: nats-seeds
  secret:
    secretName: {{ .root.Values.bus.credentials.existingSecret }}
    defaultMode: 0400
    items:
      - key: {{ .role }}.nk
        path: {{ .role }}.nk
- name: nats-creds
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- end }}
{{- if .root.Values.bus.tls.existingSecret }}
- name: nats-tls
  secret:
    secretName: {{ .root.Values.bus.tls.existingSecret }}
    defaultMode: 0444
{{- end }}
{{- end -}}

{{/*
The Redis URL (env BULKHEAD_REDIS) of the edge and billing: externalRedis.url
(which may use $(REDIS_PASSWORD), read from externalRedis.passwordSecret) or
the whole URL from externalRedis.existingSecret.
*/}}
{{- define "bulkhead.redisEnv" -}}
{{- $r := .Values.externalRedis -}}
{{- if and $r.url $r.existingSecret }}
{{- fail "externalRedis: give url or existingSecret, not both" }}
{{- end }}
{{- with $r.passwordSecret }}
{{- if .name }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ tpl .name $ }}
      key: {{ required "externalRedis.passwordSecret.key: the Secret's key holding the password" .key }}
{{- end }}
{{- end }}
{{- if $r.existingSecret }}
- name: BULKHEAD_REDIS
  valueFrom:
    secretKeyRef:
      name: {{ $r.existingSecret }}
      key: {{ $r.urlKey }}
{{- else }}
- name: BULKHEAD_REDIS
  value: {{ tpl (required "externalRedis.url or externalRedis.existingSecret: Redis (or Valkey) is required, for quotas and the usage ledger" $r.url) . | quote }}
{{- end }}
{{- end -}}

{{- define "bulkhead.modelMount" -}}
- name: models
  mountPath: {{ .Values.modelStore.mountPath }}
  readOnly: true
- name: catalog
  mountPath: /etc/bulkhead/catalog
  readOnly: true
{{- end -}}

{{- define "bulkhead.modelVolumes" -}}
- name: models
  {{- toYaml .Values.modelStore.volume | nindent 2 }}
- name: catalog
  configMap:
    name: {{ include "bulkhead.fullname" . }}-catalog
{{- end -}}
