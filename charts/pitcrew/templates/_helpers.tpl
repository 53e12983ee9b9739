{{- /* The chart's name in object names and labels: nameOverride, else the chart's. */ -}}
{{- define "pitcrew.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /* The prefix of every object's name: fullnameOverride, else the release name with
the chart's name (once, if the release name holds it already). */ -}}
{{- define "pitcrew.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "pitcrew.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* The ServiceAccounts are <this>-operator, -agent, -probe, -remediation. */ -}}
{{- define "pitcrew.serviceAccountPrefix" -}}
{{- default (include "pitcrew.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "pitcrew.labels" -}}
app.kubernetes.io/name: {{ include "pitcrew.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: pitcrew
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "pitcrew.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pitcrew.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /* repository@digest when a digest is set, else repository:tag (tag: appVersion). */ -}}
{{- define "pitcrew.imageRef" -}}
{{- $image := index . 0 -}}
{{- $appVersion := index . 1 -}}
{{- if $image.digest -}}
{{ $image.repository }}@{{ $image.digest }}
{{- else -}}
{{ $image.repository }}:{{ $image.tag | default $appVersion }}
{{- end -}}
{{- end -}}

{{- define "pitcrew.image" -}}
{{ include "pitcrew.imageRef" (list .Values.image .Chart.AppVersion) }}
{{- end -}}

{{- define "pitcrew.probeImage" -}}
{{ include "pitcrew.imageRef" (list .Values.probes.image .Chart.AppVersion) }}
{{- end -}}

{{- /* The operator's image: with slurm.enabled and slurm.image.repository, the one with
Slurm's client (built from image.*, docs/install.md), else image.*. */ -}}
{{- define "pitcrew.operatorImage" -}}
{{- if and .Values.slurm.enabled .Values.slurm.image.repository -}}
{{ include "pitcrew.imageRef" (list .Values.slurm.image .Chart.AppVersion) }}
{{- else -}}
{{ include "pitcrew.image" . }}
{{- end -}}
{{- end -}}

{{- /* --slurm-scontrol: slurm.scontrol with slurm.enabled, else empty (no Slurm client). */ -}}
{{- define "pitcrew.slurmScontrol" -}}
{{- if .Values.slurm.enabled }}{{ .Values.slurm.scontrol }}{{ end -}}
{{- end -}}

{{- define "pitcrew.imagePullSecretNames" -}}
{{- range $i, $secret := .Values.imagePullSecrets }}{{ if $i }},{{ end }}{{ $secret.name }}{{ end }}
{{- end -}}

{{- /* The subjects of a training-job RoleBinding, as a JSON list: each of `accounts`
in `namespace`. */ -}}
{{- define "pitcrew.trainingJobSubjects" -}}
{{- $subjects := list -}}
{{- range .accounts -}}
{{- $subjects = append $subjects (dict "kind" "ServiceAccount" "name" . "namespace" $.namespace) -}}
{{- end -}}
{{- toJson $subjects -}}
{{- end -}}

{{- define "pitcrew.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{- /* The pod security context of the operator and the CRD hook: Pod Security's
`restricted` level. */ -}}
{{- define "pitcrew.restrictedPod" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}
