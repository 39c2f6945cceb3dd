{{/* Names and labels shared by every object of a peerlab release. */}}
{{- define "peerlab.name" -}}pl{{ .Values.run.short }}{{- end }}

{{- define "peerlab.labels" -}}
app.kubernetes.io/name: peerlab
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
peerlab.run: {{ .Values.run.short | quote }}
peerlab.run-id: {{ .Values.run.id | quote }}
{{- end }}

{{- define "peerlab.tokenSecret" -}}
{{- .Values.control.existingSecret | default (printf "%s-control" (include "peerlab.name" .)) -}}
{{- end }}
