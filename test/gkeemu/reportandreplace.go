// Package gkeemu stands in for GKE's own report-and-replace flow in the
// test world, as GKE documents it: a node labelled
// cloud.google.com/fault-behavior is reported (its pods evicted first,
// PodDisruptionBudgets and graces respected), its progress written to
// cloud.google.com/report-and-replace-status (PodsEvicted,
// OperationRUNNING, then OperationDone once the VM is back, or Error) with
// the operation in cloud.google.com/report-and-replace-operation; when the
// VM is back, the label is cleared, and so it is on an error. The status
// is left behind, as GKE's page says nothing of clearing it: a later
// attempt finds the last one's. The page writes the error status both
// Error and ERROR (SetErrorStatus).
//
// Concurrency: a ReportAndReplace is safe for concurrent use.
package gkeemu

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Report is one host GKE reported.
type Report struct {
	Node, Behavior, Operation string
	// BootID is the node's boot ID when it was reported: another one
	// means the VM is back.
	BootID string
}

// ReportAndReplace is the stand-in.
type ReportAndReplace struct {
	c kubernetes.Interface
	// Refuse, when set, makes every report end in Error (GKE refuses a
	// node that does not consume a reservation).
	mu      sync.Mutex
	refuse  bool
	reports []Report
	seq     int
	// errorStatus is how an error is written (Error unless set).
	errorStatus string
	// attempts counts, by node, the attempts begun (its pods evicted for
	// the label).
	attempts map[string]int
}

// Start runs the stand-in until ctx ends.
func Start(ctx context.Context, c kubernetes.Interface) *ReportAndReplace {
	r := &ReportAndReplace{c: c}
	f := informers.NewSharedInformerFactory(c, 0)
	inf := f.Core().V1().Nodes().Informer()
	work := make(chan string, 64)
	enqueue := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok {
			if _, asked := n.Labels[protocol.LabelFaultBehavior]; asked {
				work <- n.Name
			}
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) }})
	go inf.Run(ctx.Done())
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case name := <-work:
				r.step(ctx, name)
			}
		}
	}()
	return r
}

// SetRefuse makes the reports from now on end in Error.
func (r *ReportAndReplace) SetRefuse(refuse bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refuse = refuse
}

// SetErrorStatus makes an error be written as status (GKE's page writes
// both Error and ERROR).
func (r *ReportAndReplace) SetErrorStatus(status string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errorStatus = status
}

// Attempts is how many attempts GKE began on node: each begins when the
// label is on and no attempt is under way.
func (r *ReportAndReplace) Attempts(node string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts[node]
}

// Reports are the hosts reported so far.
func (r *ReportAndReplace) Reports() []Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Report(nil), r.reports...)
}

// step moves name's flow on by what its Node shows.
func (r *ReportAndReplace) step(ctx context.Context, name string) {
	n, err := r.c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return
	}
	behavior, asked := n.Labels[protocol.LabelFaultBehavior]
	if !asked {
		return
	}
	r.mu.Lock()
	errorStatus := r.errorStatus
	if errorStatus == "" {
		errorStatus = protocol.GKEStatusError
	}
	r.mu.Unlock()
	switch status := n.Labels[protocol.LabelReportAndReplaceStatus]; status {
	case "", protocol.GKEStatusOperationDone, protocol.GKEStatusError, "ERROR":
		if err := r.evict(ctx, name); err != nil {
			return // retried at the Node's next change
		}
		r.mu.Lock()
		if r.attempts == nil {
			r.attempts = map[string]int{}
		}
		r.attempts[name]++
		r.mu.Unlock()
		r.label(ctx, name, map[string]any{protocol.LabelReportAndReplaceStatus: protocol.GKEStatusPodsEvicted})
	case protocol.GKEStatusPodsEvicted:
		r.mu.Lock()
		refuse := r.refuse
		r.seq++
		op := fmt.Sprintf("operation-%d-gke-report-%d", time.Now().UnixMilli(), r.seq)
		if !refuse {
			r.reports = append(r.reports, Report{Node: name, Behavior: behavior, Operation: op, BootID: n.Status.NodeInfo.BootID})
		}
		r.mu.Unlock()
		if refuse {
			// On an error GKE also removes the fault-behavior label; to
			// retry, a person puts it back.
			r.label(ctx, name, map[string]any{protocol.LabelReportAndReplaceStatus: errorStatus, protocol.LabelFaultBehavior: nil})
			return
		}
		r.label(ctx, name, map[string]any{protocol.LabelReportAndReplaceStatus: protocol.GKEStatusOperationRunning, protocol.LabelReportAndReplaceOperation: op})
	case protocol.GKEStatusOperationRunning:
		for _, rep := range r.Reports() {
			if rep.Node == name && rep.Operation == n.Labels[protocol.LabelReportAndReplaceOperation] && rep.BootID != n.Status.NodeInfo.BootID {
				// The VM is back: done, and the label cleared.
				r.label(ctx, name, map[string]any{protocol.LabelReportAndReplaceStatus: protocol.GKEStatusOperationDone, protocol.LabelFaultBehavior: nil})
			}
		}
	}
}

// evict evicts name's pods but DaemonSet and mirror pods, through the
// Eviction API.
func (r *ReportAndReplace) evict(ctx context.Context, name string) error {
	pods, err := r.c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror || p.DeletionTimestamp != nil || ownedByDaemonSet(&p) {
			continue
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
		if err := r.c.CoreV1().Pods(p.Namespace).EvictV1(ctx, ev); err != nil {
			return err
		}
	}
	return nil
}

func ownedByDaemonSet(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// label merges labels (nil removes) into name's.
func (r *ReportAndReplace) label(ctx context.Context, name string, labels map[string]any) {
	_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := r.c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for k, v := range labels {
			if v == nil {
				delete(n.Labels, k)
			} else {
				n.Labels[k] = v.(string)
			}
		}
		_, err = r.c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{FieldManager: "gke-report-and-replace"})
		return err
	})
}
