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
{{- /* The job label of placer's scrape targets: the monitors set it, the alert rules match it. */ -}}
{{- define "placer.job" -}}
{{- .Values.metricsJob | default (printf "%s/%s" .Release.Namespace .Release.Name) -}}
{{- end -}}
