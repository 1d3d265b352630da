{{/*
A broker's StatefulSet: one broker's (the chart's default, `replicas` independent brokers) or one
broker of a cluster (templates/broker-cluster.yaml: one pod, a fixed broker name and id). Call
with a dict: root ($), name, replicas, labels (what sets this StatefulSet's pods apart from other
brokers': {} for one broker), advertiseHost, clusterArgs (more `rocketbox broker` flags), haPort
(0: none), affinity.
*/}}
{{- define "rocketbox.brokerStatefulSet" -}}
{{- $root := .root -}}
{{- $b := $root.Values.broker -}}
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ .name }}
  labels:
    {{- include "rocketbox.componentLabels" (dict "root" $root "component" "broker") | nindent 4 }}
    {{- with .labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  replicas: {{ .replicas }}
  serviceName: {{ include "rocketbox.brokerHeadlessName" $root }}
  # Brokers of one StatefulSet are independent of each other: start and replace them all at once.
  podManagementPolicy: Parallel
  updateStrategy:
    type: RollingUpdate
  persistentVolumeClaimRetentionPolicy:
    # The store outlives the StatefulSet: deleting or scaling it down never deletes messages.
    whenDeleted: Retain
    whenScaled: Retain
  selector:
    matchLabels:
      {{- include "rocketbox.selectorLabels" (dict "root" $root "component" "broker") | nindent 6 }}
      {{- with .labels }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
  template:
    metadata:
      labels:
        {{- include "rocketbox.componentLabels" (dict "root" $root "component" "broker") | nindent 8 }}
        {{- with .labels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $b.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      # Kubernetes' per-Service env vars (<SERVICE>_PORT…) of a Service named rocketbox-… would
      # start with ROCKETBOX_, the prefix rocketbox reads its options from.
      enableServiceLinks: false
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: {{ $b.terminationGracePeriodSeconds }}
      securityContext:
        {{- include "rocketbox.podSecurityContext" $root.Values | nindent 8 }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: broker
          image: {{ include "rocketbox.image" $root.Values | quote }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            - broker
            - --data-dir=/var/lib/rocketbox/broker
            - {{ printf "--listen=0.0.0.0:%d" (int $b.port) | quote }}
            # Routes name this pod by its stable DNS name (POD_NAME, POD_NAMESPACE below).
            - {{ printf "--advertise-host=%s" .advertiseHost | quote }}
            {{- range .clusterArgs }}
            - {{ . | quote }}
            {{- end }}
            - {{ $b.autoCreateTopic | ternary "--auto-create-topic" "--no-auto-create-topic" }}
            - {{ printf "--flush=%s" $b.flush | quote }}
            - {{ printf "--segment-size-mib=%d" (int $b.segmentSizeMiB) | quote }}
            - {{ printf "--file-reserved-hours=%v" $b.fileReservedHours | quote }}
            {{- range (include "rocketbox.brokerTopics" $root | fromJsonArray) }}
            - {{ printf "--topic=%s" . | quote }}
            {{- end }}
            {{- range $b.groups }}
            - {{ printf "--group=%s" . | quote }}
            {{- end }}
            {{- if $root.Values.metrics.enabled }}
            - {{ printf "--metrics-listen=0.0.0.0:%d" (int $b.metricsPort) | quote }}
            {{- end }}
            {{- if $b.auth.enabled }}
            # Every call signed and checked against the users (docs/security.md).
            - --auth
            - --auth-key-file=/etc/rocketbox/acl/acl.key
            - {{ printf "--auth-clock-skew-s=%d" (int $b.auth.clockSkewSeconds) | quote }}
            {{- end }}
            {{- range $b.extraArgs }}
            - {{ . | quote }}
            {{- end }}
          env:
            {{- include "rocketbox.commonEnv" $root.Values | nindent 12 }}
            {{- if $b.auth.enabled }}
            # The bootstrap admin, made (or its secret reset) at every start.
            - name: ROCKETBOX_AUTH_ADMIN_ACCESS_KEY
              valueFrom:
                secretKeyRef:
                  name: {{ include "rocketbox.brokerAdminSecretName" $root | quote }}
                  key: {{ $b.auth.accessKeyKey | quote }}
            - name: ROCKETBOX_AUTH_ADMIN_SECRET_KEY
              valueFrom:
                secretKeyRef:
                  name: {{ include "rocketbox.brokerAdminSecretName" $root | quote }}
                  key: {{ $b.auth.secretKeyKey | quote }}
            {{- end }}
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
          ports:
            - name: grpc
              containerPort: {{ $b.port }}
              protocol: TCP
            {{- if .haPort }}
            - name: ha
              containerPort: {{ .haPort }}
              protocol: TCP
            {{- end }}
            {{- if $root.Values.metrics.enabled }}
            - name: metrics
              containerPort: {{ $b.metricsPort }}
              protocol: TCP
            {{- end }}
          # grpc.health.v1 "" is SERVING once the store is recovered and the server is bound, and
          # NOT_SERVING from SIGTERM on.
          startupProbe:
            grpc:
              port: {{ $b.port }}
              service: ""
            periodSeconds: 5
            timeoutSeconds: 3
            failureThreshold: {{ div (add $b.startupTimeoutSeconds 4) 5 }}
          readinessProbe:
            grpc:
              port: {{ $b.port }}
              service: ""
            periodSeconds: 5
            timeoutSeconds: 3
            failureThreshold: 3
          livenessProbe:
            grpc:
              port: {{ $b.port }}
              service: ""
            periodSeconds: 10
            timeoutSeconds: 5
            failureThreshold: 6
          resources:
            {{- toYaml $b.resources | nindent 12 }}
          securityContext:
            {{- include "rocketbox.containerSecurityContext" $root.Values | nindent 12 }}
          volumeMounts:
            - name: data
              mountPath: /var/lib/rocketbox/broker
            - name: tmp
              mountPath: /tmp
            {{- if $b.auth.enabled }}
            - name: acl-key
              mountPath: /etc/rocketbox/acl
              readOnly: true
            {{- end }}
      volumes:
        - name: tmp
          emptyDir:
            sizeLimit: 256Mi
        {{- if $b.auth.enabled }}
        - name: acl-key
          secret:
            secretName: {{ $b.auth.keySecret | default (include "rocketbox.brokerAuthSecretName" $root) | quote }}
            defaultMode: 0440
            items:
              - key: acl.key
                path: acl.key
        {{- end }}
      {{- with $b.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $b.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
  volumeClaimTemplates:
    - apiVersion: v1
      kind: PersistentVolumeClaim
      metadata:
        name: data
        labels:
          {{- include "rocketbox.selectorLabels" (dict "root" $root "component" "broker") | nindent 10 }}
          {{- with .labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
      spec:
        accessModes:
          {{- toYaml $b.persistence.accessModes | nindent 10 }}
        {{- with $b.persistence.storageClassName }}
        storageClassName: {{ . | quote }}
        {{- end }}
        resources:
          requests:
            storage: {{ $b.persistence.size | quote }}
{{- end -}}
