{{- /*
The values every template reads: the release's values merged over the chart's defaults
(_defaults.tpl, generated from chart_values.py). A key set to null -- which Helm removes -- is its
default again, so `helm upgrade --reuse-values --set <path>=null` renders (docs/chart.md).
*/ -}}
{{- define "gpustack-operator.values" -}}
{{- $defaults := include "gpustack-operator.defaults" . | fromJson -}}
{{- $given := include "gpustack-operator.dropNulls" .Values | fromJson -}}
{{- toJson (mustMergeOverwrite $defaults $given) -}}
{{- end -}}

{{- /*
A map without its null values, at any depth (as JSON). Helm removes most nulls before the templates run,
not all: after `helm upgrade --reuse-values --set worker=null`, the next --reuse-values upgrade hands the
templates `worker: null`, which would otherwise overwrite the default section with nothing.
*/ -}}
{{- define "gpustack-operator.dropNulls" -}}
{{- $out := dict -}}
{{- range $key, $value := . -}}
{{- if kindIs "map" $value -}}
{{- $_ := set $out $key (include "gpustack-operator.dropNulls" $value | fromJson) -}}
{{- else if not (kindIs "invalid" $value) -}}
{{- $_ := set $out $key $value -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{- define "gpustack-operator.fullname" -}}
{{- .fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- /* The labels of every object; (dict "root" $ "component" "<name>") */ -}}
{{- define "gpustack-operator.labels" -}}
app.kubernetes.io/name: gpustack-operator
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: gpustack-operator
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end -}}

{{- define "gpustack-operator.selector" -}}
app.kubernetes.io/name: gpustack-operator
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- /* (dict "root" $ "v" $v) */ -}}
{{- define "gpustack-operator.image" -}}
{{- $tag := .v.image.tag | default .root.Chart.AppVersion -}}
{{- printf "%s:%s" .v.image.repository $tag -}}
{{- end -}}

{{- /* The GPUSTACK_<M>_* overrides of one row (supplement §4.4); (dict "name" $name "row" $row) */ -}}
{{- define "gpustack-operator.manufacturerEnv" -}}
{{- $prefix := printf "GPUSTACK_%s_" (upper .name) }}
- name: {{ $prefix }}PCI_VENDOR_ID
  value: {{ .row.pciVendorID | quote }}
- name: {{ $prefix }}ACCELERATABLE_RESOURCE_NAME
  value: {{ .row.resourceName | quote }}
{{- with .row.runtimeName }}
- name: {{ $prefix }}ACCELERATABLE_RUNTIME_NAME
  value: {{ . | quote }}
{{- end }}
{{- with .row.partitionKind }}
- name: {{ $prefix }}PARTITION_KIND
  value: {{ . | quote }}
{{- end }}
{{- end -}}

{{- /* The names of the enabled manufacturers, sorted, checked; (dict "v" $v) */ -}}
{{- define "gpustack-operator.enabledManufacturers" -}}
{{- $names := list -}}
{{- range $name, $row := .v.global.manufacturers -}}
{{- if $row.enabled -}}
{{- if not $row.pciVendorID -}}
{{- fail (printf "global.manufacturers.%s.pciVendorID is empty: its nodes are selected by feature.node.kubernetes.io/pci-<pciVendorID>.present" $name) -}}
{{- end -}}
{{- if not $row.resourceName -}}
{{- fail (printf "global.manufacturers.%s.resourceName is empty: it names the resource its device plugin advertises" $name) -}}
{{- end -}}
{{- if and $row.runtimeInjectsDriver (not $row.runtimeName) -}}
{{- fail (printf "global.manufacturers.%s: runtimeInjectsDriver is set but runtimeName is empty (the Device Manager runs under that RuntimeClass)" $name) -}}
{{- end -}}
{{- $names = append $names $name -}}
{{- end -}}
{{- end -}}
{{- toJson (sortAlpha $names) -}}
{{- end -}}
