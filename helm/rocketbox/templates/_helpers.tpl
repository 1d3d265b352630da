{{/*
Names, labels, the image and security contexts shared by every rocketbox manifest. The sidecar's
templates (_sidecar.tpl) use only the helpers that take the values alone, because an app's chart
calls them with its own .Release and .Chart.
*/}}

{{- define "rocketbox.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/*
The prefix of every resource name. 40 characters at most: "-broker-headless" is the longest
suffix, and a StatefulSet's pods carry "<name>-<ordinal>" and "<name>-<revision hash>" labels
that Kubernetes limits to 63 characters.
*/}}
{{- define "rocketbox.fullname" -}}
{{- $name := .Values.nameOverride | default .Chart.Name -}}
{{- $full := .Values.fullnameOverride -}}
{{- if not $full -}}
{{- $full = hasPrefix $name .Release.Name | ternary .Release.Name (printf "%s-%s" .Release.Name $name) -}}
{{- end -}}
{{- $full | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "rocketbox.brokerName" -}}
{{- printf "%s-broker" (include "rocketbox.fullname" .) -}}
{{- end -}}

{{- define "rocketbox.brokerHeadlessName" -}}
{{- printf "%s-broker-headless" (include "rocketbox.fullname" .) -}}
{{- end -}}

{{- define "rocketbox.exampleAppName" -}}
{{- printf "%s-example-app" (include "rocketbox.fullname" .) -}}
{{- end -}}

{{/* Labels every resource carries. */}}
{{- define "rocketbox.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "rocketbox.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: rocketbox
{{- end -}}

{{/* Selector labels of one component: call with (dict "root" $ "component" "broker"). */}}
{{- define "rocketbox.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rocketbox.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* All labels of one component: call with (dict "root" $ "component" "broker"). */}}
{{- define "rocketbox.componentLabels" -}}
{{ include "rocketbox.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The image reference; takes the chart's values. A digest, when given, wins over the tag. */}}
{{- define "rocketbox.image" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository .image.tag -}}
{{- end -}}
{{- end -}}

{{/* A pod's securityContext; takes the chart's values. */}}
{{- define "rocketbox.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .securityContext.runAsUser }}
runAsGroup: {{ .securityContext.runAsGroup }}
fsGroup: {{ .securityContext.fsGroup }}
# Re-own a volume's files only when its root does not already belong to fsGroup: a large store
# would otherwise be walked on every start.
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
A rocketbox container's securityContext; takes the chart's values. It repeats the user so that
the sidecar runs as rocketbox's user inside an app's pod whatever that pod's own settings.
*/}}
{{- define "rocketbox.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .securityContext.runAsUser }}
runAsGroup: {{ .securityContext.runAsGroup }}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* env entries every rocketbox process gets; takes the chart's values. */}}
{{- define "rocketbox.commonEnv" -}}
- name: ROCKETBOX_LOG_FORMAT
  value: {{ .logFormat | quote }}
{{- end -}}

{{/* The broker's gRPC address inside the cluster, HOST:PORT (through its client Service). */}}
{{- define "rocketbox.brokerAddress" -}}
{{- printf "%s.%s.svc.%s:%d" (include "rocketbox.brokerName" .) .Release.Namespace .Values.broker.clusterDomain (int .Values.broker.port) -}}
{{- end -}}

{{/*
"true" when the release runs a cluster (NameServers, broker groups, slaves): broker.brokerGroups
> 1, broker.slavesPerGroup > 0 or namesrv.enabled; "" for the default single broker.
*/}}
{{- define "rocketbox.cluster" -}}
{{- $b := .Values.broker -}}
{{- if and $b.enabled (or (gt (int $b.brokerGroups) 1) (gt (int $b.slavesPerGroup) 0) .Values.namesrv.enabled) -}}
true
{{- end -}}
{{- end -}}

{{/*
"true" when reconcile.master is a Spark cluster's (spark://…, anything but local[…]): the job's pod
is then Spark's driver, and the tasks run on the cluster's workers; "" for a run in the pod.
The same pattern as the job's own (reconcile/config.py, LOCAL_MASTER).
*/}}
{{- define "rocketbox.reconcileOnCluster" -}}
{{- $master := .Values.reconcile.master -}}
{{- if and $master (not (regexMatch "^local(\\[(\\*|[0-9]+)(,[0-9]+)?\\])?$" $master)) -}}
true
{{- end -}}
{{- end -}}

{{- define "rocketbox.namesrvName" -}}
{{- printf "%s-namesrv" (include "rocketbox.fullname" .) -}}
{{- end -}}

{{- define "rocketbox.namesrvHeadlessName" -}}
{{- printf "%s-namesrv-headless" (include "rocketbox.fullname" .) -}}
{{- end -}}

{{/* Every NameServer pod's stable DNS name and port, joined with ';' (the brokers' --namesrv). */}}
{{- define "rocketbox.namesrvAddresses" -}}
{{- $n := .Values.namesrv -}}
{{- $addresses := list -}}
{{- range $i := until (int $n.replicas) -}}
{{- $addresses = append $addresses (printf "%s-%d.%s.%s.svc.%s:%d" (include "rocketbox.namesrvName" $) $i (include "rocketbox.namesrvHeadlessName" $) $.Release.Namespace $.Values.broker.clusterDomain (int $n.port)) -}}
{{- end -}}
{{- join ";" $addresses -}}
{{- end -}}

{{/*
A cluster's brokers as a JSON list, group by group, master first: each with its group's name
(broker-a ...), its letter, broker id, role, StatefulSet name (<broker>-<letter>-<id>) and the
stable DNS name of its one pod.
*/}}
{{- define "rocketbox.clusterBrokers" -}}
{{- $b := .Values.broker -}}
{{- $brokers := list -}}
{{- range $g := until (int $b.brokerGroups) -}}
{{- $letter := substr $g (add1 $g | int) "abcdefghijklmnopqrstuvwxyz" -}}
{{- range $id := until (add1 $b.slavesPerGroup | int) -}}
{{- $sts := printf "%s-%s-%d" (include "rocketbox.brokerName" $) $letter $id -}}
{{- $host := printf "%s-0.%s.%s.svc.%s" $sts (include "rocketbox.brokerHeadlessName" $) $.Release.Namespace $b.clusterDomain -}}
{{- $role := eq $id 0 | ternary $b.role "SLAVE" -}}
{{- $brokers = append $brokers (dict "name" (printf "broker-%s" $letter) "letter" $letter "id" $id "role" $role "statefulSet" $sts "host" $host) -}}
{{- end -}}
{{- end -}}
{{- toJson $brokers -}}
{{- end -}}

{{/* A cluster group's master Service: <broker>-<letter>. */}}
{{- define "rocketbox.groupServiceName" -}}
{{- printf "%s-%s" (include "rocketbox.brokerName" .root) .letter -}}
{{- end -}}

{{/*
The access points a sidecar of this release sends to, as a JSON list of HOST:PORT: the broker's
client Service, or in a cluster every group's master Service (the masters take the sends; the
NameServers' routes lead clients on from there).
*/}}
{{- define "rocketbox.brokerAccessPoints" -}}
{{- if include "rocketbox.cluster" . -}}
{{- $points := list -}}
{{- range $g := until (int .Values.broker.brokerGroups) -}}
{{- $letter := substr $g (add1 $g | int) "abcdefghijklmnopqrstuvwxyz" -}}
{{- $points = append $points (printf "%s.%s.svc.%s:%d" (include "rocketbox.groupServiceName" (dict "root" $ "letter" $letter)) $.Release.Namespace $.Values.broker.clusterDomain (int $.Values.broker.port)) -}}
{{- end -}}
{{- toJson $points -}}
{{- else -}}
{{- toJson (list (include "rocketbox.brokerAddress" .)) -}}
{{- end -}}
{{- end -}}

{{/*
The broker's topics: broker.topics, plus the example app's when it is enabled and not already
listed (by name).
*/}}
{{- define "rocketbox.brokerTopics" -}}
{{- $topics := .Values.broker.topics -}}
{{- if .Values.exampleApp.enabled -}}
{{- $names := list -}}
{{- range $topics }}{{ $names = append $names (splitList ":" . | first) }}{{ end -}}
{{- if not (has .Values.exampleApp.topic $names) -}}
{{- $topics = append $topics (printf "%s:8:NORMAL" .Values.exampleApp.topic) -}}
{{- end -}}
{{- end -}}
{{- toJson $topics -}}
{{- end -}}

{{/* The chart's own Secret of the brokers' auth: bootstrap admin and ACL key (broker-auth-secret.yaml). */}}
{{- define "rocketbox.brokerAuthSecretName" -}}
{{- printf "%s-broker-auth" (include "rocketbox.fullname" .) -}}
{{- end -}}

{{/* The Secret holding the bootstrap admin's credentials: broker.auth.adminSecret, or the chart's. */}}
{{- define "rocketbox.brokerAdminSecretName" -}}
{{- .Values.broker.auth.adminSecret | default (include "rocketbox.brokerAuthSecretName" .) -}}
{{- end -}}

