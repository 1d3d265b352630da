{{/*
rocketbox's sidecar beside any app: a Kubernetes native sidecar (an initContainers entry with
restartPolicy: Always). The kubelet starts it before the app's containers and starts those only
once its startup probe passes (the outbox is writable), keeps it running beside them, and stops
it only after they have exited, so the app's last sends still find it.

An app's chart lists rocketbox as a dependency and calls these templates with one dict:

  values              the rocketbox chart's values: `.Values.rocketbox` in the app's chart (Helm
                      fills in rocketbox's defaults and checks them against its values.schema.json)
  app                 the app's resource name; the RocksDB outbox claim is "<app>-rocketbox-outbox"
  appShutdownSeconds  (rocketbox.sidecar.terminationGracePeriodSeconds only) how long the app's own
                      containers may take to stop after SIGTERM

  initContainers:
    {{- include "rocketbox.sidecar.initContainer" (dict "values" .Values.rocketbox "app" "my-app") | nindent 4 }}
  volumes:
    {{- include "rocketbox.sidecar.volumes" (dict "values" .Values.rocketbox "app" "my-app") | nindent 4 }}

The README's Kubernetes section and helm/examples/app-with-sidecar show a whole app chart.
*/}}

{{- define "rocketbox.sidecar.outboxMountPath" -}}/var/lib/rocketbox/sidecar{{- end -}}
{{- define "rocketbox.sidecar.securityPath" -}}/etc/rocketbox/sidecar{{- end -}}

{{/* The port the kubelet's gRPC probes check: the app port, or the plaintext health port while
TLS is on (the kubelet's gRPC probes cannot speak TLS). Takes the sidecar's values. */}}
{{- define "rocketbox.sidecar.probePort" -}}
{{- if .security.tls.existingSecret -}}{{ .security.healthPort }}{{- else -}}{{ .port }}{{- end -}}
{{- end -}}

{{/* The sidecar's security args (docs/security.md): files mounted from Secrets, never values. */}}
{{- define "rocketbox.sidecar.securityArgs" -}}
{{- $sec := .security -}}
{{- $path := include "rocketbox.sidecar.securityPath" . -}}
{{- if and $sec.tls.clientCaSecret (not $sec.tls.existingSecret) -}}
{{- fail "sidecar.security.tls.clientCaSecret (mTLS) needs sidecar.security.tls.existingSecret (the sidecar's own certificate)" -}}
{{- end -}}
{{- if $sec.tls.existingSecret }}
- {{ printf "--tls-cert=%s/tls/tls.crt" $path | quote }}
- {{ printf "--tls-key=%s/tls/tls.key" $path | quote }}
- {{ printf "--health-listen=0.0.0.0:%d" (int $sec.healthPort) | quote }}
{{- end }}
{{- if $sec.tls.clientCaSecret }}
- {{ printf "--tls-client-ca=%s/client-ca/ca.crt" $path | quote }}
{{- end }}
{{- if $sec.token.existingSecret }}
- {{ printf "--token-file=%s/token/%s" $path $sec.token.secretKey | quote }}
{{- end }}
{{- if $sec.broker.tls }}
- "--broker-tls"
{{- end }}
{{- if $sec.broker.caSecret }}
- {{ printf "--broker-tls-ca=%s/broker-ca/ca.crt" $path | quote }}
{{- end }}
{{- end -}}

{{/* The RocketMQ front's args: its address, and who may call it (docs/rocketmq-front.md). A
front of a sidecar with a token is protected by the apps' access keys or by mTLS, or left open
by name (insecure): the rule of `rocketbox sidecar`, failed here at render rather than in a pod
that cannot start. Takes the sidecar's values. */}}
{{- define "rocketbox.sidecar.rocketmqArgs" -}}
{{- $front := .rocketmq -}}
{{- $sec := .security -}}
{{- if and $sec.token.existingSecret (not $sec.tls.clientCaSecret) (not $front.credentialsSecret) (not $front.insecure) -}}
{{- fail "sidecar.rocketmq.enabled with sidecar.security.token: the RocketMQ front would take any client's sends unchecked. Set sidecar.rocketmq.credentialsSecret to a Secret with the apps' access keys (access_key=/secret_key= line pairs, key sidecar.rocketmq.credentialsKey), require client certificates with sidecar.security.tls.clientCaSecret, or set sidecar.rocketmq.insecure=true to accept an open front." -}}
{{- end -}}
{{- if and $front.insecure (or $front.credentialsSecret $sec.tls.clientCaSecret) -}}
{{- fail "sidecar.rocketmq.insecure=true says the RocketMQ front checks no credentials, but sidecar.rocketmq.credentialsSecret or sidecar.security.tls.clientCaSecret makes it check them: set one or the other." -}}
{{- end -}}
- {{ printf "--rocketmq-listen=0.0.0.0:%d" (int $front.port) | quote }}
{{- with $front.advertise }}
- {{ printf "--rocketmq-advertise=%s" . | quote }}
{{- end }}
{{- with $front.credentialsSecret }}
- {{ printf "--front-credentials-file=%s/front-credentials/%s" (include "rocketbox.sidecar.securityPath" $) ($front.credentialsKey | default "credentials") | quote }}
{{- end }}
{{- if $front.insecure }}
- "--rocketmq-front-insecure"
{{- end }}
{{- end -}}

{{/* The Secrets the sidecar reads, as (volume name, Secret, mount directory) triples. */}}
{{- define "rocketbox.sidecar.securityVolumes" -}}
{{- $sec := .security -}}
{{- $volumes := list -}}
{{- if $sec.tls.existingSecret }}{{ $volumes = append $volumes (list "rocketbox-tls" $sec.tls.existingSecret "tls") }}{{ end -}}
{{- if $sec.tls.clientCaSecret }}{{ $volumes = append $volumes (list "rocketbox-client-ca" $sec.tls.clientCaSecret "client-ca") }}{{ end -}}
{{- if $sec.token.existingSecret }}{{ $volumes = append $volumes (list "rocketbox-token" $sec.token.existingSecret "token") }}{{ end -}}
{{- if $sec.broker.caSecret }}{{ $volumes = append $volumes (list "rocketbox-broker-ca" $sec.broker.caSecret "broker-ca") }}{{ end -}}
{{- if and .rocketmq.enabled .rocketmq.credentialsSecret }}{{ $volumes = append $volumes (list "rocketbox-front-credentials" .rocketmq.credentialsSecret "front-credentials") }}{{ end -}}
{{- toJson $volumes -}}
{{- end -}}

{{/* The outbox URL's env entry for any rocketbox container: call with (dict "values" … "name" ENV). */}}
{{- define "rocketbox.outbox.urlEnv" -}}
{{- $outbox := .values.outbox -}}
- name: {{ .name }}
{{- if eq $outbox.type "rocksdb" }}
  value: {{ printf "rocksdb://%s/outbox" (include "rocketbox.sidecar.outboxMountPath" .) | quote }}
{{- else }}
{{- $secret := get $outbox $outbox.type }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret.existingSecret | quote }}
      key: {{ $secret.secretKey | quote }}
{{- end }}
{{- end -}}

{{/*
Fails rendering when the outbox choice cannot work; renders nothing otherwise. Takes the chart's
values. The schema has already checked types and names; these rules span several keys.
*/}}
{{- define "rocketbox.outbox.validate" -}}
{{- $outbox := .outbox -}}
{{- if eq $outbox.type "rocksdb" -}}
{{- if and (not $outbox.rocksdb.persistence.enabled) (not $outbox.rocksdb.allowEphemeral) -}}
{{- fail "outbox.type=rocksdb needs a persistent volume: with outbox.rocksdb.persistence.enabled=false the outbox would be an emptyDir and every spooled message would be lost with the pod. Enable outbox.rocksdb.persistence (a claim the chart makes, or outbox.rocksdb.persistence.existingClaim), or set outbox.rocksdb.allowEphemeral=true to accept the loss (tests and demos only)." -}}
{{- end -}}
{{- else -}}
{{- $secret := get $outbox $outbox.type -}}
{{- if not $secret.existingSecret -}}
{{- $example := eq $outbox.type "redis" | ternary "redis://[:password@]host:port/db?prefix=NAME" "mysql+pymysql://user:password@host:port/db?table=NAME" -}}
{{- fail (printf "outbox.type=%s needs the outbox URL from a Secret: set outbox.%s.existingSecret to the name of an existing Secret whose key %q (outbox.%s.secretKey) holds %s" $outbox.type $outbox.type $secret.secretKey $outbox.type $example) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The sidecar container, as one list item for the pod's initContainers. Dict: values, app, and
optionally defaultBrokers (a list of HOST:PORT used when sidecar.brokers is empty) and root (the
chart's top context: with it, the sidecar of a release whose brokers run with --auth takes their
admin's credentials when sidecar.security.broker.credentialsSecret names none).
*/}}
{{- define "rocketbox.sidecar.initContainer" -}}
{{- $v := .values -}}
{{- $s := $v.sidecar -}}
{{- include "rocketbox.outbox.validate" $v -}}
{{- if and $s.rocketmq.enabled (has (int $s.rocketmq.port) (list (int $s.port) (int $s.metricsPort))) -}}
{{- fail (printf "sidecar.rocketmq.port %d is also sidecar.port or sidecar.metricsPort: the sidecar listens on each, so each needs its own port (the front's default is 8982)" (int $s.rocketmq.port)) -}}
{{- end -}}
{{- $brokers := $s.brokers | default .defaultBrokers -}}
{{- if not $brokers -}}
{{- fail "sidecar.brokers: name the broker(s) the sidecar sends to, as HOST:PORT (e.g. rocketbox-broker.messaging.svc.cluster.local:8081)" -}}
{{- end -}}
- name: rocketbox-sidecar
  image: {{ include "rocketbox.image" $v | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  # A native sidecar: runs beside the app's containers for the pod's whole life.
  restartPolicy: Always
  args:
    - sidecar
    - {{ printf "--listen=0.0.0.0:%d" (int $s.port) | quote }}
    {{- range $brokers }}
    - {{ printf "--broker=%s" . | quote }}
    {{- end }}
    {{- if $v.metrics.enabled }}
    - {{ printf "--metrics-listen=0.0.0.0:%d" (int $s.metricsPort) | quote }}
    {{- end }}
    {{- if $s.rocketmq.enabled }}
    {{- include "rocketbox.sidecar.rocketmqArgs" $s | nindent 4 }}
    {{- end }}
    {{- with $s.lookupNamesrv }}
    - {{ printf "--lookup-namesrv=%s" . | quote }}
    {{- end }}
    - {{ printf "--shutdown-grace-ms=%d" (int $s.shutdownGraceMs) | quote }}
    {{- include "rocketbox.sidecar.securityArgs" $s | nindent 4 }}
    {{- range $s.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    {{- include "rocketbox.commonEnv" $v | nindent 4 }}
    # The outbox URL by env, not as an argument: a Redis or MySQL password stays in its Secret.
    {{- include "rocketbox.outbox.urlEnv" (dict "values" $v "name" "ROCKETBOX_SIDECAR_OUTBOX") | nindent 4 }}
    {{- $credentials := $s.security.broker.credentialsSecret }}
    {{- $keys := list $s.security.broker.accessKeyKey $s.security.broker.secretKeyKey }}
    {{- if and (not $credentials) .root $v.broker.enabled $v.broker.auth.enabled }}
    {{- /* This release's brokers run with --auth and no credentials are named: their admin's. */}}
    {{- $credentials = include "rocketbox.brokerAdminSecretName" .root }}
    {{- $keys = list $v.broker.auth.accessKeyKey $v.broker.auth.secretKeyKey }}
    {{- end }}
    {{- with $credentials }}
    # The sidecar's own credentials for a broker with --auth, from their Secret.
    - name: ROCKETBOX_BROKER_ACCESS_KEY
      valueFrom:
        secretKeyRef:
          name: {{ . | quote }}
          key: {{ index $keys 0 | quote }}
    - name: ROCKETBOX_BROKER_SECRET_KEY
      valueFrom:
        secretKeyRef:
          name: {{ . | quote }}
          key: {{ index $keys 1 | quote }}
    {{- end }}
  ports:
    - name: sidecar-grpc
      containerPort: {{ $s.port }}
      protocol: TCP
    {{- if $v.metrics.enabled }}
    - name: sidecar-metrics
      containerPort: {{ $s.metricsPort }}
      protocol: TCP
    {{- end }}
    {{- if $s.rocketmq.enabled }}
    # apache.rocketmq.v2, for apps on an official RocketMQ 5 SDK (sidecar.rocketmq).
    - name: rocketmq
      containerPort: {{ $s.rocketmq.port }}
      protocol: TCP
    {{- end }}
    {{- if $s.security.tls.existingSecret }}
    # Plaintext grpc.health.v1 alone, for the probes (the app port speaks TLS).
    - name: sidecar-health
      containerPort: {{ $s.security.healthPort }}
      protocol: TCP
    {{- end }}
  # gRPC health "" is SERVING only while the outbox is writable: the app's containers start after
  # it first is, and the pod leaves its Services' endpoints while it is not.
  startupProbe:
    grpc:
      port: {{ include "rocketbox.sidecar.probePort" $s }}
      service: ""
    periodSeconds: 2
    timeoutSeconds: 2
    failureThreshold: {{ div (add $s.startupTimeoutSeconds 1) 2 }}
  readinessProbe:
    grpc:
      port: {{ include "rocketbox.sidecar.probePort" $s }}
      service: ""
    periodSeconds: 5
    timeoutSeconds: 2
    failureThreshold: 2
  # No liveness probe on purpose: an outbox that is briefly unwritable (Redis restarting) must
  # not restart the sidecar and drop the sends it is finishing.
  resources:
    {{- toYaml $s.resources | nindent 4 }}
  securityContext:
    {{- include "rocketbox.containerSecurityContext" $v | nindent 4 }}
  volumeMounts:
    - name: rocketbox-tmp
      mountPath: /tmp
    {{- if eq $v.outbox.type "rocksdb" }}
    - name: rocketbox-outbox
      mountPath: {{ include "rocketbox.sidecar.outboxMountPath" . }}
    {{- end }}
    {{- range (include "rocketbox.sidecar.securityVolumes" $s | fromJsonArray) }}
    - name: {{ index . 0 }}
      mountPath: {{ printf "%s/%s" (include "rocketbox.sidecar.securityPath" $) (index . 2) }}
      readOnly: true
    {{- end }}
{{- end -}}

{{/* The claim the app's RocksDB outbox lives on. Dict: values, app. */}}
{{- define "rocketbox.sidecar.outboxClaimName" -}}
{{- .values.outbox.rocksdb.persistence.existingClaim | default (printf "%s-rocketbox-outbox" .app) -}}
{{- end -}}

{{/* The sidecar's volumes, as list items for the pod's volumes. Dict: values, app. */}}
{{- define "rocketbox.sidecar.volumes" -}}
{{- $outbox := .values.outbox -}}
- name: rocketbox-tmp
  emptyDir:
    sizeLimit: 64Mi
{{- range (include "rocketbox.sidecar.securityVolumes" .values.sidecar | fromJsonArray) }}
- name: {{ index . 0 }}
  secret:
    secretName: {{ index . 1 | quote }}
    # Read by the pod's fsGroup (the sidecar's non-root user), no one else.
    defaultMode: 0440
{{- end }}
{{- if eq $outbox.type "rocksdb" }}
- name: rocketbox-outbox
  {{- if $outbox.rocksdb.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ include "rocketbox.sidecar.outboxClaimName" . }}
  {{- else }}
  # outbox.rocksdb.allowEphemeral: spooled messages are lost with the pod.
  emptyDir: {}
  {{- end }}
{{- end }}
{{- end -}}

{{/*
The PersistentVolumeClaim of the app's RocksDB outbox, a whole manifest; nothing when the outbox is
not RocksDB on a chart-made claim. Dict: values, app, and optionally labels (a map).
*/}}
{{- define "rocketbox.sidecar.outboxClaim" -}}
{{- $p := .values.outbox.rocksdb.persistence -}}
{{- if and (eq .values.outbox.type "rocksdb") $p.enabled (not $p.existingClaim) }}
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {{ include "rocketbox.sidecar.outboxClaimName" . }}
  {{- with .labels }}
  labels:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  annotations:
    # Spooled messages live here: uninstalling the app must not delete them.
    helm.sh/resource-policy: keep
spec:
  accessModes:
    {{- toYaml $p.accessModes | nindent 4 }}
  {{- with $p.storageClassName }}
  storageClassName: {{ . | quote }}
  {{- end }}
  resources:
    requests:
      storage: {{ $p.size | quote }}
{{- end }}
{{- end -}}

{{/*
The pod's terminationGracePeriodSeconds: the app's own shutdown, then the sidecar's
--shutdown-grace-ms (rounded up to seconds), then a margin for closing the outbox. The kubelet
sends SIGTERM to a native sidecar only after the app's containers have exited, all within this.
Dict: values, appShutdownSeconds.
*/}}
{{- define "rocketbox.sidecar.terminationGracePeriodSeconds" -}}
{{- $s := .values.sidecar -}}
{{- add (int .appShutdownSeconds) (div (add (int $s.shutdownGraceMs) 999) 1000) (int $s.shutdownMarginSeconds) -}}
{{- end -}}
