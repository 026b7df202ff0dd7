{{- define "placer.labels" -}}
app.kubernetes.io/name: placer
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
{{- define "placer.selector" -}}
app.kubernetes.io/name: placer
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
