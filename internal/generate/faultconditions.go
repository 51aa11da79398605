package generate

import "fmt"

// FaultConditionsPolicy is the name of the policy that holds the conditions
// the aggregator's policy ConfigMap names as faults to the detectors, as
// WritersPolicy holds those the chart's values name: the chart knows only
// the conditions of its own policy value, and a ConfigMap of the
// operator's (the kustomize base's, or the chart's with policy: {}) names
// others. It reads the ConfigMap itself (a parameter of the binding), so
// the fence follows what the aggregator reads; with no ConfigMap there is
// no fault condition, and the binding lets every change through.
const FaultConditionsPolicy = "maintenance-handler-fault-conditions"

// policyConfigMap is the name of the aggregator's policy ConfigMap, in the
// release's namespace (the chart's --config-map).
const policyConfigMap = "maintenance-handler"

// kubeletConditions are the conditions the kubelet itself keeps on its
// Node: never fenced from it, whatever a fault policy names (a fault
// policy naming one repairs on the node's own word).
const kubeletConditions = "['Ready', 'MemoryPressure', 'DiskPressure', 'PIDPressure', 'NetworkUnavailable']"

// faultTypeMatch is the CEL of whether the policy text names condition
// type t as a fault condition's type (a YAML or JSON type: key, quoted or
// not; \Q..\E reads the type literally).
const faultTypeMatch = `variables.policy.matches(r'(?m)(^|[\s{,-])["\x27]?type["\x27]?\s*:\s*["\x27]?\Q' + t + r'\E["\x27]?\s*($|[\s,}#])')`

// detectorRule is the validation that holds the conditions whose types
// the CEL list list names to the detectors: set only by a named detector,
// removed by one, a person or the uninstall Job.
func detectorRule(list string) string {
	return fmt.Sprintf(`    - expression: >-
        variables.oldConditions.filter(c, c.type in %[1]s) == variables.newConditions.filter(c, c.type in %[1]s) ||
        variables.who['detector'] || ((variables.who['person'] || variables.who['uninstall']) &&
        variables.newConditions.filter(c, c.type in %[1]s).all(c, c in variables.oldConditions))
`, list)
}

// faultConditionsPolicy is the policy FaultConditionsPolicy and its
// binding, as chart template text.
func faultConditionsPolicy() string {
	return fmt.Sprintf(`# The fault conditions the policy ConfigMap %[2]s names (faults.conditions[].type,
# the cluster's and every pool's), read from the ConfigMap itself: only the
# detectors admissionPolicy.detectors names set them, whatever conditions
# the chart's values name. The kubelet's own conditions stay its own.
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: %[1]s
  labels:
    {{- include "mh.labels" . | nindent 4 }}
spec:
  failurePolicy: Fail
%[7]s  paramKind:
    apiVersion: v1
    kind: ConfigMap
  variables:
%[3]s    - name: policy
      expression: "has(params.data) && 'policy.yaml' in params.data ? params.data['policy.yaml'] : ''"
    - name: oldConditions
      expression: "oldObject != null && has(oldObject.status) && has(oldObject.status.conditions) ? oldObject.status.conditions : []"
    - name: newConditions
      expression: "has(object.status) && has(object.status.conditions) ? object.status.conditions : []"
    - name: faults
      expression: >-
        (variables.oldConditions + variables.newConditions).map(c, c.type).filter(t, !(t in %[4]s) &&
        %[5]s)
  validations:
%[6]s      messageExpression: >-
        variables.user + " may not change a fault condition of a Node (" + variables.faults.join(", ") + ", which the policy ConfigMap %[2]s names): only the detectors admissionPolicy.detectors names may set them, and no node's identity remove them"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: %[1]s
  labels:
    {{- include "mh.labels" . | nindent 4 }}
spec:
  policyName: %[1]s
  paramRef:
    name: %[2]s
    namespace: {{ .Release.Namespace }}
    parameterNotFoundAction: Allow
  validationActions: ["Deny"]
`, FaultConditionsPolicy, policyConfigMap, whoVariables, kubeletConditions, faultTypeMatch, detectorRule("variables.faults"), nodeWrites)
}
