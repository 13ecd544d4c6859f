{{/* The objects' name: RELEASE-manifold, or RELEASE alone when it already says manifold. */}}
{{- define "manifold.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels that select the pods: the Service's and the PodDisruptionBudget's selector. */}}
{{- define "manifold.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "manifold.labels" -}}
{{ include "manifold.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Whether sessions live in Redis. */}}
{{- define "manifold.redis" -}}
{{- if or .Values.redis.url .Values.redis.urlSecret.name -}}true{{- end -}}
{{- end -}}

{{/*
The gateway's configuration: .Values.config with what the chart owns set from the other
values. Refuses combinations the gateway would refuse, or that would lose sessions.
*/}}
{{- define "manifold.config" -}}
{{- $redis := include "manifold.redis" . -}}
{{- if and (gt (int .Values.replicaCount) 1) (not $redis) -}}
{{- fail "replicaCount above 1 needs redis.url or redis.urlSecret: replicas share sessions only through Redis (see values-replicated.yaml)" -}}
{{- end -}}
{{- if and $redis (not .Values.keys.ids) -}}
{{- fail "sessions in Redis need keys.secretName and keys.ids: replicas seal what they send each other with them" -}}
{{- end -}}
{{- if and .Values.keys.ids (not .Values.keys.secretName) -}}
{{- fail "keys.ids needs keys.secretName, the Secret that holds them" -}}
{{- end -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $auth := default (dict) $cfg.auth -}}
{{- if and .Values.allowUnauthenticated (not (or $auth.oidc $auth.api_keys $auth.api_keys_file)) -}}
{{- $_ := set $auth "allow_unauthenticated" true -}}
{{- $_ := set $cfg "auth" $auth -}}
{{- end -}}
{{- $_ := set $cfg "listen" (printf "0.0.0.0:%d" (int .Values.port)) -}}
{{- $_ := set $cfg "drain_timeout" (printf "%ds" (int .Values.drainTimeoutSeconds)) -}}
{{- if $redis -}}
{{- $_ := set $cfg "session_store" (dict "type" "redis" "url" "${MANIFOLD_REDIS_URL}" "key_prefix" .Values.redis.keyPrefix) -}}
{{- end -}}
{{- if .Values.keys.ids -}}
{{- $keys := list -}}
{{- range $i, $id := .Values.keys.ids -}}
{{- $keys = append $keys (dict "id" $id "secret" (printf "${MANIFOLD_KEY_%d}" $i)) -}}
{{- end -}}
{{- $_ := set $cfg "keys" $keys -}}
{{- end -}}
{{- if .Values.admin.enabled -}}
{{- $admin := deepCopy (default (dict) $cfg.admin) -}}
{{- $_ := set $admin "listen" (printf "%s:%d" (ternary "0.0.0.0" "127.0.0.1" .Values.admin.expose) (int .Values.admin.port)) -}}
{{- if .Values.admin.roles -}}
{{- $_ := set $admin "roles" .Values.admin.roles -}}
{{- end -}}
{{- if .Values.admin.apiKeysSecret -}}
{{- $_ := set $admin "api_keys_file" "/etc/manifold/admin-keys/api-keys.yaml" -}}
{{- end -}}
{{- $_ := set $cfg "admin" $admin -}}
{{- else if .Values.admin.expose -}}
{{- fail "admin.expose needs admin.enabled" -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
