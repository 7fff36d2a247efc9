{{/*
Names and labels.
*/}}
{{- define "trawl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "trawl.fullname" -}}
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

{{/* The name of one role's objects: <fullname>-<component>. */}}
{{- define "trawl.componentName" -}}
{{- printf "%s-%s" (include "trawl.fullname" .root | trunc 45 | trimSuffix "-") .component }}
{{- end }}

{{- define "trawl.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels of one role. Takes (dict "root" $ "component" "api"). */}}
{{- define "trawl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trawl.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* All labels of one role's objects. Takes (dict "root" $ "component" "api"). */}}
{{- define "trawl.labels" -}}
helm.sh/chart: {{ include "trawl.chart" .root }}
{{ include "trawl.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: trawl
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end }}

{{- define "trawl.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "trawl.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image of a role. Takes (dict "root" $ "tag" <the role's imageTag>): a role's
own tag wins (for upgrading the roles one at a time), then image.digest, then
image.tag, then the chart's appVersion.
*/}}
{{- define "trawl.image" -}}
{{- $v := .root.Values -}}
{{- $repository := .repository | default $v.image.repository -}}
{{- if .tag -}}
{{ $repository }}:{{ .tag }}
{{- else if and $v.image.digest (not .repository) -}}
{{ $repository }}@{{ $v.image.digest }}
{{- else -}}
{{ $repository }}:{{ $v.image.tag | default .root.Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/*
The isolated pool's egress rules for its browser endpoints: the port of each of
BRIGHTDATA_BROWSER_ENDPOINT (default wss://brd.superproxy.io:9222),
BRIGHTDATA_PROXY_ENDPOINT (default brd.superproxy.io:33335) and TRAWL_BROWSER_WS
(when set) in isolatedWorkers.env, to that address when it is an IPv4 address,
else to public addresses (a NetworkPolicy cannot name a host).
*/}}
{{- define "trawl.browserEgress" -}}
{{- $env := .Values.isolatedWorkers.env -}}
{{- $endpoints := list (get $env "BRIGHTDATA_BROWSER_ENDPOINT" | default "wss://brd.superproxy.io:9222") (get $env "BRIGHTDATA_PROXY_ENDPOINT" | default "brd.superproxy.io:33335") -}}
{{- with (get $env "TRAWL_BROWSER_WS") }}{{ $endpoints = append $endpoints . }}{{ end -}}
{{- range $endpoints }}
{{- $url := toString . -}}
{{- $scheme := regexFind "^[a-zA-Z]+://" $url | trimSuffix "://" | lower -}}
{{- $rest := regexReplaceAll "^[a-zA-Z]+://" $url "" -}}
{{- $rest = regexReplaceAll "/.*$" $rest "" -}}
{{- $hostport := regexReplaceAll "^.*@" $rest "" -}}
{{- $host := regexReplaceAll ":[0-9]+$" $hostport "" -}}
{{- $port := regexFind "[0-9]+$" (regexFind ":[0-9]+$" $hostport) -}}
{{- if not $port }}{{ $port = ternary "443" "80" (eq $scheme "wss") }}{{ end }}
- to:
    - ipBlock:
        {{- if regexMatch "^[0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+$" $host }}
        cidr: {{ $host }}/32
        {{- else }}
        cidr: 0.0.0.0/0
        except: [10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 169.254.0.0/16, 127.0.0.0/8, 100.64.0.0/10]
        {{- end }}
  ports:
    - port: {{ atoi $port }}
      protocol: TCP
{{- end }}
{{- end }}

{{/* The Secret the roles read: the existing one, or the chart's. */}}
{{- define "trawl.secretName" -}}
{{- if .Values.secrets.existingSecret }}
{{- .Values.secrets.existingSecret }}
{{- else }}
{{- include "trawl.fullname" . }}
{{- end }}
{{- end }}

{{/*
Secret keys by value name. The chart's Secret holds those that are set; a role's
pods reference the keys that role reads (trawl.secretEnv).
*/}}
{{- define "trawl.secretKeys" -}}
databaseUrl: TRAWL_DATABASE_URL
databaseReadUrl: TRAWL_DATABASE_READ_URL
apiKeys: TRAWL_API_KEYS
adminKeys: TRAWL_ADMIN_KEYS
slackBotToken: TRAWL_SLACK_BOT_TOKEN
brightdataApiToken: BRIGHTDATA_API_TOKEN
slackSigningSecret: TRAWL_SLACK_SIGNING_SECRET
slackWebhookUrl: TRAWL_SLACK_WEBHOOK_URL
webhookUrl: TRAWL_WEBHOOK_URL
webhookSecret: TRAWL_WEBHOOK_SECRET
secretKey: TRAWL_SECRET_KEY
redisUrl: TRAWL_REDIS_URL
natsUrl: TRAWL_NATS_URL
{{- end }}

{{/*
Environment from the Secret. Takes (dict "root" $ "keys" (list "TRAWL_DATABASE_URL" ...)).
TRAWL_DATABASE_URL, and TRAWL_REDIS_URL / TRAWL_NATS_URL when they come from the
Secret, are required (the pod does not start without them); the rest are
optional, so an existing Secret need not have every key.
*/}}
{{- define "trawl.secretEnv" -}}
{{- $root := .root }}
{{- range .keys }}
- name: {{ . }}
  valueFrom:
    secretKeyRef:
      name: {{ include "trawl.secretName" $root }}
      key: {{ . }}
      {{- if not (has . (list "TRAWL_DATABASE_URL" "TRAWL_REDIS_URL" "TRAWL_NATS_URL")) }}
      optional: true
      {{- end }}
{{- end }}
{{- end }}

{{/*
The environment of one role. Takes (dict "root" $ "role" "api" "service" "trawl-api"
"secretKeys" (list ...) "nats" true "redis" true "env" .Values.api.env "extra" (list of env entries)).
*/}}
{{- define "trawl.env" -}}
{{- $root := .root }}
{{- $v := $root.Values }}
{{- $keys := .secretKeys }}
{{- if .nats }}
{{- if $v.config.natsUrl }}
- name: TRAWL_NATS_URL
  value: {{ $v.config.natsUrl | quote }}
{{- else }}
{{- $keys = append $keys "TRAWL_NATS_URL" }}
{{- end }}
- name: TRAWL_NATS_PREFIX
  value: {{ $v.config.natsPrefix | quote }}
{{- end }}
{{- if .redis }}
{{- if $v.config.redisUrl }}
- name: TRAWL_REDIS_URL
  value: {{ $v.config.redisUrl | quote }}
{{- else }}
{{- $keys = append $keys "TRAWL_REDIS_URL" }}
{{- end }}
{{- end }}
{{- if and .brightdata $v.config.brightdataApiUrl }}
- name: BRIGHTDATA_API_URL
  value: {{ $v.config.brightdataApiUrl | quote }}
{{- end }}
- name: RUST_LOG
  value: {{ $v.config.rustLog | quote }}
{{- if $v.otel.endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $v.otel.endpoint | quote }}
{{- end }}
- name: OTEL_SERVICE_NAME
  value: {{ .service | quote }}
{{- if and .tools $v.toolsConfig }}
- name: TRAWL_TOOLS_CONFIG
  value: /etc/trawl/tools.yaml
{{- end }}
{{- range .extra }}
- {{ toYaml . | nindent 2 | trim }}
{{- end }}
{{- range $name, $value := $v.config.env }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- range $name, $value := .env }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- include "trawl.secretEnv" (dict "root" $root "keys" $keys) }}
{{- end }}

{{/* Pod annotations: config checksums (roll pods on change) and Prometheus. */}}
{{- define "trawl.podAnnotations" -}}
{{- $root := .root }}
{{- if not $root.Values.secrets.existingSecret }}
checksum/secret: {{ include (print $root.Template.BasePath "/secret.yaml") $root | sha256sum }}
{{- end }}
{{- if $root.Values.toolsConfig }}
checksum/tools: {{ $root.Values.toolsConfig | sha256sum }}
{{- end }}
{{- if $root.Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- with (merge (dict) (.extra | default dict) ($root.Values.podAnnotations | default dict)) }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Probes on a named port. Takes (dict "root" $ "port" "http"). */}}
{{- define "trawl.probes" -}}
{{- $p := .root.Values.probes }}
{{- if $p.startup.enabled }}
startupProbe:
  httpGet:
    path: /healthz
    port: {{ .port }}
  periodSeconds: {{ $p.startup.periodSeconds }}
  failureThreshold: {{ $p.startup.failureThreshold }}
{{- end }}
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ .port }}
  periodSeconds: {{ $p.liveness.periodSeconds }}
  timeoutSeconds: {{ $p.liveness.timeoutSeconds }}
  failureThreshold: {{ $p.liveness.failureThreshold }}
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ .port }}
  periodSeconds: {{ $p.readiness.periodSeconds }}
  timeoutSeconds: {{ $p.readiness.timeoutSeconds }}
  failureThreshold: {{ $p.readiness.failureThreshold }}
{{- end }}

{{/* Volumes every role has: /tmp, and the tools file when set. */}}
{{- define "trawl.volumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .root.Values.tmpSizeLimit }}
{{- if and .tools .root.Values.toolsConfig }}
- name: tools
  configMap:
    name: {{ include "trawl.componentName" (dict "root" .root "component" "tools") }}
{{- end }}
{{- end }}

{{- define "trawl.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if and .tools .root.Values.toolsConfig }}
- name: tools
  mountPath: /etc/trawl
  readOnly: true
{{- end }}
{{- end }}

{{/*
Scheduling of one role: its own nodeSelector/tolerations/affinity, else the
chart-wide ones. Takes (dict "root" $ "role" .Values.api).
*/}}
{{- define "trawl.scheduling" -}}
{{- $v := .root.Values }}
{{- with (default $v.nodeSelector .role.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default $v.tolerations .role.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default $v.affinity .role.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The pod spec parts every role shares (security, image pull secrets). */}}
{{- define "trawl.podCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end }}

{{/*
Egress rules every role needs: DNS, then the listed backing services. Takes
(dict "root" $ "nats" true "redis" true "postgres" true "https" true).
*/}}
{{- define "trawl.egress" -}}
{{- $np := .root.Values.networkPolicy }}
- to:
    {{- toYaml $np.dns.to | nindent 4 }}
  ports:
    - port: 53
      protocol: UDP
    - port: 53
      protocol: TCP
{{- range $svc := list "nats" "redis" "postgres" }}
{{- if (get $ $svc) }}
{{- $rule := get $np $svc }}
- ports:
    - port: {{ $rule.port }}
      protocol: TCP
  {{- with $rule.to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}
{{- if .root.Values.otel.endpoint }}
- ports:
    - port: {{ $np.otlp.port }}
      protocol: TCP
  {{- with $np.otlp.to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- if .https }}
- ports:
    {{- range $np.https.ports }}
    - port: {{ . }}
      protocol: TCP
    {{- end }}
  {{- with $np.https.to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- with $np.extraEgress }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The nats-jetstream trigger. Takes (dict "root" $ "consumer" "workers" "scale" .Values.keda). */}}
{{- define "trawl.natsTrigger" -}}
{{- $k := .root.Values.keda }}
- type: nats-jetstream
  metadata:
    natsServerMonitoringEndpoint: {{ $k.natsServerMonitoringEndpoint | quote }}
    account: {{ $k.account | quote }}
    stream: {{ printf "%s_SLICES" (upper .root.Values.config.natsPrefix) | quote }}
    consumer: {{ .consumer | quote }}
    lagThreshold: {{ .scale.lagThreshold | toString | quote }}
    activationLagThreshold: {{ .scale.activationLagThreshold | toString | quote }}
    useHttps: {{ $k.useHttps | toString | quote }}
{{- end }}
