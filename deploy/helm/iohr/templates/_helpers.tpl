{{/*
The chart's name: nameOverride, else "iohr".
*/}}
{{- define "iohr.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name. A release named like the chart ("iohr", "iohr-prod")
is the prefix itself, so `helm install iohr` gives the kustomize base's names
(iohr-controller, iohr-agent-0, ...); another release is prefixed ("prod-iohr-...").
At most 40 characters: the longest suffix, "-controller-agent", keeps a Service's name a
DNS label (63).
*/}}
{{- define "iohr.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := include "iohr.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Labels of every object.
*/}}
{{- define "iohr.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: iohr
{{- end }}

{{/*
What selects a component's pods (immutable in a Deployment, StatefulSet or DaemonSet):
the chart, the release and the component. Called with (dict "root" $ "component" NAME).
*/}}
{{- define "iohr.selectorLabels" -}}
app.kubernetes.io/name: {{ include "iohr.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
The image of every container: the tag defaults to the chart's appVersion.
*/}}
{{- define "iohr.image" -}}
{{- printf "%s:%v" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
The agents' image: agents.imageTag when set (the controllers upgraded first), else the
controllers'.
*/}}
{{- define "iohr.agentImage" -}}
{{- if .Values.agents.imageTag }}
{{- printf "%s:%v" .Values.image.repository .Values.agents.imageTag }}
{{- else }}
{{- include "iohr.image" . }}
{{- end }}
{{- end }}

{{/*
The agent link's Service, which the agents dial and the server certificate must name.
*/}}
{{- define "iohr.agentLinkService" -}}
{{- include "iohr.fullname" . }}-controller-agent
{{- end }}

{{/*
What the agents pass to --controller: agents.controllers, else this release's agent link.
*/}}
{{- define "iohr.agentControllers" -}}
{{- if .Values.agents.controllers }}
{{- toYaml .Values.agents.controllers }}
{{- else }}
{{- list (printf "https://%s:8443" (include "iohr.agentLinkService" .)) | toYaml }}
{{- end }}
{{- end }}
