{{/*
The chart's name, or nameOverride.
*/}}
{{- define "mimeo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of every object the chart creates: fullnameOverride, else the release name when it
already contains the chart's name, else "<release>-<chart>". Truncated to 63 characters, the
longest label value.
*/}}
{{- define "mimeo.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The labels that select the controller's pods: they never change across upgrades.
*/}}
{{- define "mimeo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mimeo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The labels on every object.
*/}}
{{- define "mimeo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "mimeo.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: controller
app.kubernetes.io/part-of: mimeo
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The ServiceAccount the controller runs as.
*/}}
{{- define "mimeo.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mimeo.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image reference: repository, then @digest when a digest is given, else :tag (default: the
chart's appVersion).
*/}}
{{- define "mimeo.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The kinds of allowKinds, resolved, as a JSON object {"kinds": [...]}, each kind as
{kind, group, resource, namespaced, flag}; `flag` is the --allow-kind value (Kind for the core
group, Kind.group otherwise). A string entry must be one of the kinds the chart knows; any other
kind is given as an object, because its resource (plural) and scope cannot be derived from its
name. Fails on an unknown string and on a kind listed twice.
*/}}
{{- define "mimeo.kinds" -}}
{{- $known := dict
  "Secret" (dict "kind" "Secret" "group" "" "resource" "secrets" "namespaced" true)
  "ConfigMap" (dict "kind" "ConfigMap" "group" "" "resource" "configmaps" "namespaced" true)
  "Policy.kyverno.io" (dict "kind" "Policy" "group" "kyverno.io" "resource" "policies" "namespaced" true)
  "ClusterPolicy.kyverno.io" (dict "kind" "ClusterPolicy" "group" "kyverno.io" "resource" "clusterpolicies" "namespaced" false)
}}
{{- range $kind := list "ValidatingPolicy" "MutatingPolicy" "GeneratingPolicy" "DeletingPolicy" "ImageValidatingPolicy" }}
{{- $_ := set $known (printf "%s.policies.kyverno.io" $kind) (dict "kind" $kind "group" "policies.kyverno.io" "resource" (printf "%sies" (lower $kind | trimSuffix "y")) "namespaced" false) }}
{{- $namespaced := printf "Namespaced%s" $kind }}
{{- $_ := set $known (printf "%s.policies.kyverno.io" $namespaced) (dict "kind" $namespaced "group" "policies.kyverno.io" "resource" (printf "%sies" (lower $namespaced | trimSuffix "y")) "namespaced" true) }}
{{- end }}
{{- $kinds := list }}
{{- $seen := dict }}
{{- range $entry := .Values.allowKinds }}
{{- $resolved := dict }}
{{- if kindIs "string" $entry }}
{{- if not (hasKey $known $entry) }}
{{- fail (printf "allowKinds: the chart does not know the kind %q; list Secret, ConfigMap, Policy.kyverno.io, ClusterPolicy.kyverno.io or one of Kyverno's CEL policy kinds (ValidatingPolicy.policies.kyverno.io, NamespacedValidatingPolicy.policies.kyverno.io, ...) by name, and any other kind as an object {kind: Widget, group: example.com, resource: widgets, namespaced: true} (resource is the plural, as `kubectl api-resources` shows it)" $entry) }}
{{- end }}
{{- $resolved = get $known $entry }}
{{- else }}
{{- $group := default "" $entry.group }}
{{- $namespaced := true }}
{{- if hasKey $entry "namespaced" }}{{ $namespaced = $entry.namespaced }}{{ end }}
{{- $resolved = dict "kind" $entry.kind "group" $group "resource" $entry.resource "namespaced" $namespaced }}
{{- end }}
{{- $flag := $resolved.kind }}
{{- if $resolved.group }}{{ $flag = printf "%s.%s" $resolved.kind $resolved.group }}{{ end }}
{{- if hasKey $seen $flag }}
{{- fail (printf "allowKinds: %s is listed twice" $flag) }}
{{- end }}
{{- $_ := set $seen $flag true }}
{{- $kinds = append $kinds (merge (dict "flag" $flag) $resolved) }}
{{- end }}
{{- dict "kinds" $kinds | toJson }}
{{- end }}

{{/*
The kinds targets[].nextTo may follow, resolved: a list of {flag, group, resource} as JSON under
"kinds". Each must be namespaced: its objects' namespaces are what a target selects.
*/}}
{{- define "mimeo.nextToKinds" -}}
{{- $known := dict
  "Cluster.clusters.openmcp.cloud" (dict "kind" "Cluster" "group" "clusters.openmcp.cloud" "resource" "clusters")
  "HelmRelease.helm.toolkit.fluxcd.io" (dict "kind" "HelmRelease" "group" "helm.toolkit.fluxcd.io" "resource" "helmreleases")
}}
{{- $kinds := list }}
{{- $seen := dict }}
{{- range $entry := .Values.nextTo.kinds }}
{{- $resolved := dict }}
{{- if kindIs "string" $entry }}
{{- if not (hasKey $known $entry) }}
{{- fail (printf "nextTo.kinds: the chart does not know the kind %q; list Cluster.clusters.openmcp.cloud or HelmRelease.helm.toolkit.fluxcd.io by name, and any other namespaced kind as an object {kind: Widget, group: example.com, resource: widgets} (resource is the plural, as `kubectl api-resources` shows it)" $entry) }}
{{- end }}
{{- $resolved = get $known $entry }}
{{- else }}
{{- if and (hasKey $entry "namespaced") (not $entry.namespaced) }}
{{- fail (printf "nextTo.kinds: %s is cluster-scoped; nextTo follows namespaced kinds only (their objects' namespaces get the copies)" $entry.kind) }}
{{- end }}
{{- $resolved = dict "kind" $entry.kind "group" (default "" $entry.group) "resource" $entry.resource }}
{{- end }}
{{- $flag := $resolved.kind }}
{{- if $resolved.group }}{{ $flag = printf "%s.%s" $resolved.kind $resolved.group }}{{ end }}
{{- if hasKey $seen $flag }}
{{- fail (printf "nextTo.kinds: %s is listed twice" $flag) }}
{{- end }}
{{- $_ := set $seen $flag true }}
{{- $kinds = append $kinds (merge (dict "flag" $flag) $resolved) }}
{{- end }}
{{- dict "kinds" $kinds | toJson }}
{{- end }}

{{/*
Whether a core kind (Secret, ConfigMap) is among the allowed kinds: "true" or "".
*/}}
{{- define "mimeo.allowsCore" -}}
{{- $resource := .resource }}
{{- range (include "mimeo.kinds" .root | fromJson).kinds }}
{{- if and (eq .group "") (eq .resource $resource) }}true{{ end }}
{{- end }}
{{- end }}

{{/*
What the chart refuses before rendering anything: combinations the controller cannot honour.
*/}}
{{- define "mimeo.validate" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicas > 1 needs leaderElection.enabled: true; without it every replica would act on every rule" }}
{{- end }}
{{- if and .Values.watchNamespaces .Values.rbac.createNamespaces }}
{{- fail "rbac.createNamespaces has no use with watchNamespaces: only ClusterSyncRules create namespaces, and with watchNamespaces mimeo reconciles no ClusterSyncRules" }}
{{- end }}
{{- if and .Values.watchNamespaces .Values.nextTo.kinds }}
{{- fail "nextTo.kinds has no use with watchNamespaces: nextTo watches its kinds cluster-wide, which mimeo limited to namespaces may not" }}
{{- end }}
{{- with .Values.inventories }}
{{- if and $.Values.watchNamespaces (or .openMCP .clusterAPI .clusterProfile.enabled) }}
{{- fail "inventories have no use with watchNamespaces: mimeo then reads no RemoteClusters, which is what an inventory makes" }}
{{- end }}
{{- if and .clusterProfile.enabled (not .clusterProfile.providersConfigMap) }}
{{- fail "inventories.clusterProfile.enabled needs inventories.clusterProfile.providersConfigMap: the provider file is the only source of credentials for ClusterProfiles" }}
{{- end }}
{{- end }}
{{- if and .Values.prometheusRule.enabled (not .Values.serviceMonitor.enabled) (not .Values.prometheusRule.selector) }}
{{- fail "prometheusRule.enabled needs serviceMonitor.enabled, or prometheusRule.selector naming the labels your Prometheus gives mimeo's series: the alerts select the series the ServiceMonitor has scraped, and without any MimeoNoLeader would fire for good" }}
{{- end }}
{{- if not .Values.allowKinds }}
{{- fail "allowKinds is empty: list at least one kind (the controller's default is Secret, ConfigMap, Policy.kyverno.io, ClusterPolicy.kyverno.io and Kyverno's CEL policy kinds)" }}
{{- end }}
{{- end }}
