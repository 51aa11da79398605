package protocol

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// AskedFor says whether someone who is not node n asked for its
// maintenance of request (its AnnotationRequestID), and until when that
// holds (zero: for as long as the maintenance lasts): the
// perform-maintenance label TriggerValue on n, which no identity of a node
// may write (a person's, or the aggregator's own pick); or the
// aggregator's accepted call for the request (AcceptedCall), which it
// made only while that label stood.
func AskedFor(n *corev1.Node, request string) (until time.Time, ok bool) {
	if n.Labels[LabelPerformMaintenance] == TriggerValue {
		return time.Time{}, true
	}
	return AcceptedCall(n, request)
}

// AcceptedCall says whether the aggregator answered the call for n's
// maintenance of request with an accepted call, made in n's present boot,
// and until when that answer holds (ComputeAnswer.Until): a call made
// before the VM booted again began a maintenance that is over, and an
// answer that names no boot or bound holds nothing.
func AcceptedCall(n *corev1.Node, request string) (until time.Time, ok bool) {
	ans, ok := ReadComputeAnswer(n)
	if !ok || request == "" || ans.ID != request || ans.Outcome != "" || ans.Boot == "" || ans.Boot != n.Status.NodeInfo.BootID || ans.Until.IsZero() {
		return time.Time{}, false
	}
	return ans.Until, true
}
