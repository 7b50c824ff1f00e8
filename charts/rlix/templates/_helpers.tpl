{{/* Name of a component's objects: <release>-rlix-<component>. */}}
{{- define "rlix.name" -}}
{{- printf "%s-rlix-%s" .root.Release.Name .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object carries; selector labels are the stable subset. */}}
{{- define "rlix.selectorLabels" -}}
app.kubernetes.io/name: rlix
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "rlix.labels" -}}
{{ include "rlix.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/*
Full image reference: [registry/]repository:tag. global.imageRegistry replaces
the image's own registry; an empty tag falls back to .defaultTag, then to the
chart's appVersion. Call with (dict "root" $ "image" <values image map>
"defaultTag" <optional>).
*/}}
{{- define "rlix.image" -}}
{{- $registry := .root.Values.global.imageRegistry | default .image.registry -}}
{{- $tag := .image.tag | default .defaultTag | default .root.Chart.AppVersion -}}
{{- if $registry -}}
{{- printf "%s/%s:%s" $registry .image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/*
The cluster's own Kubernetes version as a registry.k8s.io tag: v<major>.<minor>.<patch>,
without the pre-release or build suffix distributions add (v1.29.3+k3s1,
v1.30.1-gke.1), which the Kubernetes registry does not publish.
*/}}
{{- define "rlix.kubeVersionTag" -}}
{{- $v := semver .Capabilities.KubeVersion.Version -}}
{{- printf "v%d.%d.%d" $v.Major $v.Minor $v.Patch -}}
{{- end -}}

{{/* A component's ServiceAccount name. Call with (dict "root" $ "component" c "values" v). */}}
{{- define "rlix.serviceAccountName" -}}
{{- if .values.serviceAccount.create -}}
{{- .values.serviceAccount.name | default (include "rlix.name" .) -}}
{{- else -}}
{{- .values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* A component's ServiceAccount, when serviceAccount.create (same dict as above). */}}
{{- define "rlix.serviceAccount" -}}
{{- if .values.serviceAccount.create }}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "rlix.serviceAccountName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels: {{- include "rlix.labels" . | nindent 4 }}
  {{- with .values.serviceAccount.annotations }}
  annotations: {{- toYaml . | nindent 4 }}
  {{- end }}
---
{{- end }}
{{- end -}}

{{/* Pod template metadata: chart labels, then podLabels and podAnnotations (same dict). */}}
{{- define "rlix.podMetadata" -}}
labels:
  {{- include "rlix.labels" . | nindent 2 }}
  {{- with .values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .values.podAnnotations }}
annotations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The pod spec fields every component shares (same dict). */}}
{{- define "rlix.podCommon" -}}
serviceAccountName: {{ include "rlix.serviceAccountName" . }}
{{- with .values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .values.podSecurityContext }}
securityContext: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.global.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The container fields every component shares, after its args and ports (same dict). */}}
{{- define "rlix.containerCommon" -}}
{{- with .values.livenessProbe }}
livenessProbe: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.readinessProbe }}
readinessProbe: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.securityContext }}
securityContext: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.resources }}
resources: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A Deployment's PodDisruptionBudget, when podDisruptionBudget.enabled (same dict). */}}
{{- define "rlix.podDisruptionBudget" -}}
{{- $pdb := .values.podDisruptionBudget -}}
{{- if $pdb.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "rlix.name" . }}
  namespace: {{ .root.Release.Namespace }}
  labels: {{- include "rlix.labels" . | nindent 4 }}
spec:
  {{- if ne (toString $pdb.maxUnavailable) "" }}
  maxUnavailable: {{ $pdb.maxUnavailable }}
  {{- else }}
  minAvailable: {{ $pdb.minAvailable }}
  {{- end }}
  selector:
    matchLabels: {{- include "rlix.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end -}}

{{/*
The interference matrix: args, mount or volume (.part) for a component that
reads the ConfigMap named by .configMap, indented by .indent after a newline;
nothing at all when .configMap is "". Dict: root, configMap, part, indent.
*/}}
{{- define "rlix.interference" -}}
{{- /* A ConfigMap's file, else the built-in bound named by sharing.builtinMatrix (no volume). */}}
{{- if .configMap }}
{{- $lines := "" }}
{{- if eq .part "args" }}
{{- $lines = printf "- --interference=/etc/rlix/interference/interference.json\n- \"--interference-mode=%s\"" .root.Values.sharing.interferenceMode }}
{{- else if eq .part "mount" }}
{{- $lines = "- {name: interference, mountPath: /etc/rlix/interference, readOnly: true}" }}
{{- else }}
{{- $lines = printf "- name: interference\n  configMap: {name: %s}" .configMap }}
{{- end }}
{{- $lines | nindent .indent }}
{{- else if and .builtin (eq .part "args") }}
{{- if ne .root.Values.sharing.interferenceMode "time_slicing" }}
{{- fail (printf "sharing.builtinMatrix %s holds only for sharing.interferenceMode time_slicing, not %s: under MPS give the GPUs' own matrix (make gpu-check) in sharing.interferenceConfigMap" .builtin .root.Values.sharing.interferenceMode) }}
{{- end }}
{{- printf "- --interference=%s" .builtin | nindent .indent }}
{{- end }}
{{- end -}}
