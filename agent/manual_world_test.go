package agent_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/agent"
	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/compute"
	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/internal/policysource"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// withCompute gives v's agents the real Compute client, pointed at v's
// emulator, with the token of v's service account from v's metadata server
// (GCE_METADATA_HOST, as in production, so the test is not parallel).
func withCompute(t *testing.T, v *vm) *compute.VM {
	t.Helper()
	t.Setenv("GCE_METADATA_HOST", v.emu.Host())
	m, err := compute.NewMaintainer(testworld.Ctx(t, 10*time.Second), compute.Options{
		Endpoint: v.emu.ComputeEndpoint(),
		Backoff:  backoff.Policy{Base: 100 * time.Millisecond, Max: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := &compute.VM{Maintainer: m, Metadata: metadata.NewClient(5*time.Second, v.emu.Host()), ProviderID: getNode(t, v.name).Spec.ProviderID}
	v.compute = c
	return c
}

// manualVM is a VM with a reschedulable maintenance pending, and its agent.
func manualVM(t *testing.T, name string) (*vm, *running) {
	t.Helper()
	return manualVMWith(t, name, gceemu.Config{})
}

func manualVMWith(t *testing.T, name string, cfg gceemu.Config) (*vm, *running) {
	t.Helper()
	v := newVMWith(t, name, cfg)
	withCompute(t, v)
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 20, 2, 0, 0, 0, time.UTC), 4*time.Hour))
	r := startAgent(t, v, lifecycle.DefaultConfig)
	world.WaitNode(t, v.name, "scheduled label", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	return v, r
}

func setTrigger(t *testing.T, node, value string, set bool) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := getNode(t, node)
		if set {
			n.Labels[protocol.LabelPerformMaintenance] = value
		} else {
			delete(n.Labels, protocol.LabelPerformMaintenance)
		}
		_, err := world.Client.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func triggerGone(n *corev1.Node) bool {
	_, set := n.Labels[protocol.LabelPerformMaintenance]
	return !set
}

// eventMessages returns the messages of the Events on node with reason.
func eventMessages(t *testing.T, node, reason string) []string {
	t.Helper()
	uid := getNode(t, node).UID
	list, err := world.Client.CoreV1().Events("").List(testworld.Ctx(t, 10*time.Second), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(uid) + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Message)
	}
	return out
}

func inService(n *corev1.Node) bool {
	_, active := n.Labels[protocol.LabelActiveMaintenance]
	return !active && !protocol.HasTaint(n) && !n.Spec.Unschedulable && n.Annotations[protocol.AnnotationPhase] == ""
}

// TestManualTriggerEndToEnd: the label drains the node (a PDB holds the
// eviction until a replacement runs elsewhere; the pod gets its grace),
// then exactly one performMaintenance for this VM with its token, then the
// host-maintenance lifecycle to the end, and the label goes.
func TestManualTriggerEndToEnd(t *testing.T) {
	testworld.Need(t)
	v, r := manualVM(t, "agent-manual-0")
	spare := world.NodeT(t, testworld.NodeSpec{Name: "agent-manual-spare"})
	ns := world.Namespace(t)
	labels := map[string]string{"app": "trainer"}
	trainer := makePod(ns, "trainer-0", v.name, 3, 3*time.Second)
	trainer.Labels = labels
	createPod(t, trainer)
	peer := makePod(ns, "trainer-1", spare.Name, 3, 3*time.Second)
	peer.Labels = labels
	createPod(t, peer)
	world.Budget(t, ns, "trainer", labels, intstr.FromInt32(2), "2 healthy pods", healthy(2))

	setTrigger(t, v.name, protocol.TriggerValue, true)
	n := world.WaitNode(t, v.name, "taint and ONGOING", func(n *corev1.Node) bool {
		return protocol.HasTaint(n) && n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueOngoing
	})
	if n.Annotations[protocol.AnnotationReason] != string(protocol.ReasonManual) || !n.Spec.Unschedulable {
		t.Errorf("manual drain: reason %q, cordoned %t", n.Annotations[protocol.AnnotationReason], n.Spec.Unschedulable)
	}
	requestID := n.Annotations[protocol.AnnotationRequestID]
	// The PDB refuses: the pod stays, and nothing is asked of Compute Engine.
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(r.metrics.Evictions.WithLabelValues(drain.OutcomeBlocked)) >= 2, nil
	})
	if err != nil {
		t.Fatal("the PDB never refused the eviction")
	}
	if podGone(t, ns, "trainer-0") || len(v.emu.Calls()) != 0 {
		t.Fatalf("pod gone %t, calls %d while the PDB refuses", podGone(t, ns, "trainer-0"), len(v.emu.Calls()))
	}
	// A replacement runs elsewhere: the eviction goes through, with grace.
	// Watched from before the replacement: every change of trainer-0 is
	// seen, its deletion last with the grace it was given.
	trainer0 := watchPod(t, ns, "trainer-0")
	replacement := makePod(ns, "trainer-2", spare.Name, 3, 3*time.Second)
	replacement.Labels = labels
	createPod(t, replacement)
	gone := trainer0.gone(t)
	goneAt := gone.at
	if gone.grace != 3 || !gone.terminated {
		t.Fatalf("trainer-0 deleted with deletion grace %d (seen terminating first: %t); want evicted with its 3 s", gone.grace, gone.terminated)
	}

	n = world.WaitNode(t, v.name, "terminating", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	calls := v.emu.Calls()
	cfg := v.emu.Config()
	if len(calls) != 1 {
		t.Fatalf("performMaintenance calls %+v, want exactly one", calls)
	}
	c := calls[0]
	if c.Project != cfg.Project || c.Zone != cfg.Zone || c.Instance != cfg.Name || c.Token != v.emu.AccessToken() || c.Status != http.StatusOK || c.RequestID != requestID || requestID == "" {
		t.Errorf("call %+v; want %s/%s/%s with token %q and request ID %q", c, cfg.Project, cfg.Zone, cfg.Name, v.emu.AccessToken(), requestID)
	}
	if c.At.Before(goneAt.Add(-time.Second)) {
		t.Errorf("called at %s, before the pod was gone at %s", c.At, goneAt)
	}
	if n.Annotations[protocol.AnnotationRequested] == "" || n.Labels[protocol.LabelPerformMaintenance] != protocol.TriggerValue {
		t.Errorf("terminating: requested %q, label %q; want the record of the call, the label kept until the node is back",
			n.Annotations[protocol.AnnotationRequested], n.Labels[protocol.LabelPerformMaintenance])
	}
	// Accepted: by the call's answer, or by the notice changing first.
	world.WaitEvent(t, v.name, protocol.EventManualAccepted)
	// Compute Engine starts it: the metadata server says so, nothing new happens.
	if got := v.emu.MaintenanceEvent(); got != gceemu.EventTerminate {
		t.Errorf("maintenance-event after the call %q", got)
	}
	reboot(t, v, r)
	n = world.WaitNode(t, v.name, "back in service without the label", func(n *corev1.Node) bool { return inService(n) && triggerGone(n) })
	if n.Annotations[protocol.AnnotationRequestID] != "" || n.Annotations[protocol.AnnotationRequested] != "" {
		t.Errorf("the manual maintenance's annotations outlived it: %v", n.Annotations)
	}
	world.WaitEvent(t, v.name, protocol.EventMaintenanceCleared)
	ev := nodeEvents(t, v.name)
	if ev[protocol.EventManualStarted] != 1 || ev[protocol.EventManualAccepted] != 1 || ev[protocol.EventTerminateOnHost] != 0 {
		t.Errorf("Events %v; want one %s, one %s, and no second drain", ev, protocol.EventManualStarted, protocol.EventManualAccepted)
	}
	if got := testworld.Settled(t, r.metrics.Interruptions.WithLabelValues(protocol.HostMaintenance.Labels()...), 1); got != 1 {
		t.Errorf("interruptions{MaintenanceEvent,HW/SW Maintenance} = %v, want 1", got)
	}
	for outcome, want := range map[string]float64{protocol.ManualStarted: 1, protocol.ManualAccepted: 1} {
		if got := testworld.Settled(t, r.metrics.ManualTriggers.WithLabelValues(outcome), want); got != want {
			t.Errorf("manual_triggers{%s} = %v, want %v", outcome, got, want)
		}
	}
	if len(v.emu.Calls()) != 1 {
		t.Errorf("calls after the reboot: %d, want still 1", len(v.emu.Calls()))
	}
}

// healthy is a budget's status counting n healthy pods.
func healthy(n int32) func(*policyv1.PodDisruptionBudget) bool {
	return func(b *policyv1.PodDisruptionBudget) bool { return b.Status.CurrentHealthy == n }
}

// TestManualTriggerBadInput: every value or state the agent does not act on
// is answered with a Warning Event saying what is wrong and what is
// accepted; the label goes; the node stays in service; Compute Engine is
// not called.
func TestManualTriggerBadInput(t *testing.T) {
	testworld.Need(t)
	notReschedulable := gceemu.ScheduledNotice(time.Date(2026, 12, 20, 2, 0, 0, 0, time.UTC), 4*time.Hour)
	notReschedulable.CanReschedule = false
	cases := []struct {
		name    string
		value   string
		notice  func(*gceemu.Server)
		outcome string
		says    []string
	}{
		{name: "yes", value: "yes", outcome: protocol.ManualInvalidValue, says: []string{`"yes" is not accepted`, `the only accepted value is "true"`}},
		{name: "TRUE", value: "TRUE", outcome: protocol.ManualInvalidValue, says: []string{`"TRUE" is not accepted`}},
		{name: "1", value: "1", outcome: protocol.ManualInvalidValue, says: []string{`"1" is not accepted`}},
		{name: "empty", value: "", outcome: protocol.ManualInvalidValue, says: []string{`"" is not accepted`}},
		{name: "no notice", value: "true", notice: (*gceemu.Server).ClearNotice, outcome: protocol.ManualNoNotice,
			says: []string{"needs a pending maintenance notice", "reports none"}},
		{name: "cannot reschedule", value: "true", notice: func(s *gceemu.Server) { s.ScheduleNotice(notReschedulable) }, outcome: protocol.ManualNotReschedulable,
			says: []string{"cannot be rescheduled", "accepted only when it can"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, r := manualVM(t, "agent-manual-bad-"+string(rune('a'+i)))
			if tc.notice != nil {
				before := getNode(t, v.name).Annotations[protocol.AnnotationUpcomingMaintenance]
				tc.notice(v.emu)
				world.WaitNode(t, v.name, "notice mirrored", func(n *corev1.Node) bool {
					return n.Annotations[protocol.AnnotationUpcomingMaintenance] != before
				})
			}
			setTrigger(t, v.name, tc.value, true)
			world.WaitEvent(t, v.name, protocol.EventManualRejected, append(tc.says, "The label was removed; nothing else changed.")...)
			n := world.WaitNode(t, v.name, "label removed", triggerGone)
			if !inService(n) {
				t.Errorf("node left out of service: labels %v taints %v", n.Labels, n.Spec.Taints)
			}
			if got := testworld.Settled(t, r.metrics.ManualTriggers.WithLabelValues(tc.outcome), 1); got != 1 {
				t.Errorf("manual_triggers{%s} = %v, want 1", tc.outcome, got)
			}
			if calls := v.emu.Calls(); len(calls) != 0 {
				t.Errorf("Compute Engine called: %+v", calls)
			}
		})
	}
}

// TestManualTriggerWhileMaintenanceRuns: the label on a node whose
// maintenance Compute Engine already started is rejected (the drain goes
// on); set again during a manual maintenance it changes nothing: one drain,
// one call.
func TestManualTriggerWhileMaintenanceRuns(t *testing.T) {
	testworld.Need(t)
	t.Run("notice already ONGOING on a VM that does not serve maintenance-event", func(t *testing.T) {
		v, r := manualVMWith(t, "agent-manual-ongoing", gceemu.Config{NoMaintenanceEvent: true})
		v.emu.SetNoticeStatus(gceemu.StatusOngoing)
		world.WaitNode(t, v.name, "host maintenance", func(n *corev1.Node) bool {
			return n.Annotations[protocol.AnnotationReason] == string(protocol.ReasonHostMaintenance)
		})
		setTrigger(t, v.name, protocol.TriggerValue, true)
		world.WaitEvent(t, v.name, protocol.EventManualRejected, "A host-maintenance is already under way", "is not needed")
		n := world.WaitNode(t, v.name, "label removed", triggerGone)
		if n.Annotations[protocol.AnnotationReason] != string(protocol.ReasonHostMaintenance) || !protocol.HasTaint(n) {
			t.Errorf("the rejected label changed the running maintenance: %v", n.Annotations)
		}
		if got := testworld.Settled(t, r.metrics.ManualTriggers.WithLabelValues(protocol.ManualAlreadyOngoing), 1); got != 1 {
			t.Errorf("manual_triggers{already_ongoing} = %v, want 1", got)
		}
		if calls := v.emu.Calls(); len(calls) != 0 {
			t.Errorf("Compute Engine called: %+v", calls)
		}
	})
	t.Run("set again during a manual maintenance", func(t *testing.T) {
		v, r := manualVM(t, "agent-manual-again")
		ns := world.Namespace(t)
		createPod(t, makePod(ns, "slow", v.name, 4, 4*time.Second))
		setTrigger(t, v.name, protocol.TriggerValue, true)
		world.WaitNode(t, v.name, "ONGOING", func(n *corev1.Node) bool { return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueOngoing })
		// Removed and set again, then a value that is not accepted.
		setTrigger(t, v.name, "", false)
		setTrigger(t, v.name, protocol.TriggerValue, true)
		setTrigger(t, v.name, "yes", true)
		world.WaitEvent(t, v.name, protocol.EventManualRejected, `"yes" is not accepted`, "already under way goes on")
		world.WaitNode(t, v.name, "terminating", func(n *corev1.Node) bool {
			return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
		})
		if calls := v.emu.Calls(); len(calls) != 1 {
			t.Errorf("calls %+v, want one", calls)
		}
		if ev := nodeEvents(t, v.name); ev[protocol.EventManualStarted] != 1 {
			t.Errorf("Events %v, want one drain", ev)
		}
		if got := testworld.Settled(t, r.metrics.Evictions.WithLabelValues(drain.OutcomeEvicted), 1); got != 1 {
			t.Errorf("evictions{evicted} = %v, want 1", got)
		}
	})
}

// TestManualTriggerRetriesTransientErrors: two 503s, then success: one
// accepted call, one drain.
func TestManualTriggerRetriesTransientErrors(t *testing.T) {
	testworld.Need(t)
	v, r := manualVM(t, "agent-manual-503")
	ns := world.Namespace(t)
	createPod(t, makePod(ns, "trainer", v.name, 2, 2*time.Second))
	v.emu.InjectFault(gceemu.Fault{Path: gceemu.ComputePrefix, Kind: gceemu.FaultStatus, Status: http.StatusServiceUnavailable, Times: 2,
		Body: `{"error":{"code":503,"message":"backendError"}}`})
	setTrigger(t, v.name, protocol.TriggerValue, true)
	world.WaitNode(t, v.name, "terminating", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	if calls := v.emu.Calls(); len(calls) != 1 || calls[0].Status != http.StatusOK {
		t.Errorf("calls that reached Compute Engine %+v, want one, accepted", calls)
	}
	if got := testworld.Settled(t, r.metrics.Evictions.WithLabelValues(drain.OutcomeEvicted), 1); got != 1 {
		t.Errorf("evictions{evicted} = %v, want 1 (the drain is not repeated)", got)
	}
	// Events are recorded asynchronously, after the Node's update.
	world.WaitEvent(t, v.name, protocol.EventManualAccepted)
	if ev := nodeEvents(t, v.name); ev[protocol.EventManualStarted] != 1 || ev[protocol.EventManualAccepted] != 1 || ev[protocol.EventManualFailed] != 0 {
		t.Errorf("Events %v", ev)
	}
}

// TestManualTriggerPermissionDenied: the node goes back in service, and the
// Event names the permission and the service account.
func TestManualTriggerPermissionDenied(t *testing.T) {
	testworld.Need(t)
	v, r := manualVM(t, "agent-manual-403")
	v.emu.SetPermissionDenied(true)
	setTrigger(t, v.name, protocol.TriggerValue, true)
	msg := world.WaitEvent(t, v.name, protocol.EventManualFailed, compute.Permission, v.emu.Config().ServiceAccount, "back in service").Message
	n := world.WaitNode(t, v.name, "back in service without the label", func(n *corev1.Node) bool { return inService(n) && triggerGone(n) })
	if n.Labels[protocol.LabelScheduledMaintenanceTime] == "" {
		t.Error("the pending notice's label went with the failed trigger")
	}
	if got := testworld.Settled(t, r.metrics.ManualTriggers.WithLabelValues(protocol.ManualPermissionDenied), 1); got != 1 {
		t.Errorf("manual_triggers{permission_denied} = %v, want 1 (%s)", got, msg)
	}
	if got := testworld.Settled(t, r.metrics.Interruptions.WithLabelValues(protocol.HostMaintenance.Labels()...), 0); got != 0 {
		t.Errorf("a maintenance that never happened was counted (%v)", got)
	}
	if calls := v.emu.Calls(); len(calls) != 1 || calls[0].Status != http.StatusForbidden {
		t.Errorf("calls %+v, want one 403 (no retry)", calls)
	}
	world.WaitEvent(t, v.name, protocol.EventPermissionDenied, compute.Permission)
	if got := testworld.Settled(t, r.metrics.PermissionDenials.WithLabelValues(compute.Permission), 1); got != 1 {
		t.Errorf("compute_permission_denied_total{%s} = %v, want 1", compute.Permission, got)
	}
}

// TestManualTriggerOperationUnreadable: a role without
// compute.zoneOperations.get. The call is accepted, and reading its
// operation is refused: a Warning Event and the metric name the missing
// permission at once, without retrying the read.
func TestManualTriggerOperationUnreadable(t *testing.T) {
	testworld.Need(t)
	v, r := manualVM(t, "agent-manual-op403")
	v.emu.SetPerformMaintenanceDelay(time.Hour) // the maintenance does not begin while the test runs
	v.emu.Deny(gceemu.PermissionGetOperation, true)
	setTrigger(t, v.name, protocol.TriggerValue, true)
	world.WaitEvent(t, v.name, protocol.EventManualAccepted)
	world.WaitEvent(t, v.name, protocol.EventPermissionDenied, compute.OperationPermission, v.emu.Config().ServiceAccount)
	if got := testworld.Settled(t, r.metrics.PermissionDenials.WithLabelValues(compute.OperationPermission), 1); got != 1 {
		t.Errorf("compute_permission_denied_total{%s} = %v, want 1", compute.OperationPermission, got)
	}
}

// killedAfterCall makes the call, then never returns: the agent is killed
// with the call made and its answer lost.
type killedAfterCall struct {
	next agent.Maintainer
	made chan struct{}
}

func (k *killedAfterCall) WaitOperation(ctx context.Context, op string) (time.Time, error) {
	return k.next.WaitOperation(ctx, op)
}

func (k *killedAfterCall) PerformMaintenance(ctx context.Context, requestID string) (string, error) {
	op, err := k.next.PerformMaintenance(ctx, requestID)
	close(k.made)
	<-ctx.Done()
	return op, err
}

func (k *killedAfterCall) PerformGroupMaintenance(ctx context.Context, requestID string, subBlock bool, members int) (string, error) {
	op, err := k.next.PerformGroupMaintenance(ctx, requestID, subBlock, members)
	close(k.made)
	<-ctx.Done()
	return op, err
}

func (k *killedAfterCall) ReportHostAsFaulty(ctx context.Context, requestID, behavior, description string) (string, error) {
	op, err := k.next.ReportHostAsFaulty(ctx, requestID, behavior, description)
	close(k.made)
	<-ctx.Done()
	return op, err
}

// TestManualTriggerAgentKilledAfterCall: restarted after the call and before
// terminating, the agent does not call again.
func TestManualTriggerAgentKilledAfterCall(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-manual-kill")
	real := withCompute(t, v)
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 20, 2, 0, 0, 0, time.UTC), 4*time.Hour))
	// Compute Engine takes a while to start the maintenance it accepted.
	v.emu.SetPerformMaintenanceDelay(3 * time.Second)
	k := &killedAfterCall{next: real, made: make(chan struct{})}
	v.compute = k
	first := startAgent(t, v, lifecycle.DefaultConfig)
	world.WaitNode(t, v.name, "scheduled label", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	// From now on the first agent hears nothing new from the metadata
	// server: it dies before it can learn that its call went through.
	for _, key := range []string{metadata.KeyMaintenanceEvent, metadata.KeyPreempted, metadata.KeyUpcomingMaintenance} {
		v.emu.InjectFault(gceemu.Fault{Path: gceemu.MetadataPrefix + key, Kind: gceemu.FaultHang})
	}
	v.emu.ResetETags()
	setTrigger(t, v.name, protocol.TriggerValue, true)
	select {
	case <-k.made:
	case <-testworld.Ctx(t, 60*time.Second).Done():
		t.Fatal("the call was never made")
	}
	first.stop()
	if n := getNode(t, v.name); n.Labels[protocol.LabelActiveMaintenance] != protocol.ValueOngoing || n.Annotations[protocol.AnnotationRequested] == "" {
		t.Fatalf("killed with %q and requested %q; want ONGOING with the call recorded", n.Labels[protocol.LabelActiveMaintenance], n.Annotations[protocol.AnnotationRequested])
	}
	v.emu.ClearFaults()
	v.compute = real
	second := startAgent(t, v, lifecycle.DefaultConfig)
	world.WaitNode(t, v.name, "terminating", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	world.WaitEvent(t, v.name, protocol.EventManualAccepted, "the metadata server shows the maintenance starting")
	if calls := v.emu.Calls(); len(calls) != 1 {
		t.Errorf("calls %+v, want exactly one", calls)
	}
	reboot(t, v, second)
	world.WaitNode(t, v.name, "back in service without the label", func(n *corev1.Node) bool { return inService(n) && triggerGone(n) })
	if calls := v.emu.Calls(); len(calls) != 1 {
		t.Errorf("calls after the reboot %+v, want exactly one", calls)
	}
}

// TestManualTriggerGatedByPolicy: with gateManualTriggers in the policy
// ConfigMap, a label inside an exclusion is refused with the reason; once
// the exclusion is gone, the same label starts the maintenance.
func TestManualTriggerGatedByPolicy(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	now := time.Now().UTC()
	text := `
pools:
  default-pool:
    gateManualTriggers: true
    exclusions: [{name: launch, startTime: "` + now.Add(-time.Hour).Format(time.RFC3339) + `", endTime: "` + now.Add(time.Hour).Format(time.RFC3339) + `"}]
`
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "maintenance-handler", Namespace: ns}, Data: map[string]string{policy.ConfigKey: text}}
	if _, err := world.Client.CoreV1().ConfigMaps(ns).Create(testworld.Ctx(t, 10*time.Second), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	src := policysource.NewSource(kubeClient(t, world.Config).ConfigMapListWatch(ns, "maintenance-handler"), ns, "maintenance-handler", nil)
	if err := src.Start(testworld.Ctx(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	v := newVM(t, "agent-manual-gated")
	withCompute(t, v)
	v.gate = src.ManualGate(testworld.LabelNodePool)
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 20, 2, 0, 0, 0, time.UTC), 4*time.Hour))
	r := startAgent(t, v, lifecycle.DefaultConfig)
	world.WaitNode(t, v.name, "scheduled label", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })

	setTrigger(t, v.name, protocol.TriggerValue, true)
	world.WaitEvent(t, v.name, protocol.EventManualRejected, "gates manual maintenance", `inside the maintenance exclusion "launch"`)
	if n := world.WaitNode(t, v.name, "label removed", triggerGone); !inService(n) {
		t.Errorf("a refused trigger changed the node: %v", n.Labels)
	}
	if got := testworld.Settled(t, r.metrics.ManualTriggers.WithLabelValues(protocol.ManualExcluded), 1); got != 1 {
		t.Errorf("manual_triggers{excluded} = %v, want 1", got)
	}

	cm.Data[policy.ConfigKey] = "pools:\n  default-pool: {gateManualTriggers: true}\n"
	if _, err := world.Client.CoreV1().ConfigMaps(ns).Update(testworld.Ctx(t, 10*time.Second), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		reason, _ := v.gate(getNode(t, v.name), time.Now())
		return reason == "", nil
	})
	if err != nil {
		t.Fatal("the policy change never reached the source")
	}
	setTrigger(t, v.name, protocol.TriggerValue, true)
	world.WaitNode(t, v.name, "terminating", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	if calls := v.emu.Calls(); len(calls) != 1 {
		t.Errorf("calls %+v, want one", calls)
	}
}

// TestManualTriggerOperationFails: Compute Engine accepts the call, then
// its operation fails and the maintenance never begins. The drained node
// goes back in service, with a Warning Event and the metric.
func TestManualTriggerOperationFails(t *testing.T) {
	testworld.Need(t)
	v, r := manualVM(t, "agent-manual-opfail")
	v.emu.SetPerformMaintenanceDelay(time.Second)
	v.emu.SetOperationFailure("the host is not available for maintenance now")
	setTrigger(t, v.name, protocol.TriggerValue, true)
	// Accepted first (the Event says so), then back in service.
	world.WaitEvent(t, v.name, protocol.EventManualAccepted)
	world.WaitEvent(t, v.name, protocol.EventManualNotStarted, "its operation failed", "the host is not available for maintenance now")
	world.WaitNode(t, v.name, "back in service without the label", func(n *corev1.Node) bool { return inService(n) && triggerGone(n) })
	if got := testworld.Settled(t, r.metrics.ManualTriggers.WithLabelValues(protocol.ManualNotStarted), 1); got != 1 {
		t.Errorf("manual_triggers{not_started} = %v, want 1", got)
	}
	if calls := v.emu.Calls(); len(calls) != 1 {
		t.Errorf("calls %+v, want exactly one", calls)
	}
	// No VM stopped: a failure, not an interruption (before, the
	// acceptance was counted, and cleared the failure memory).
	if got := testworld.Settled(t, r.metrics.Interruptions.WithLabelValues(protocol.HostMaintenance.Labels()...), 0); got != 0 {
		t.Errorf("interruptions{MaintenanceEvent} = %v for a maintenance that never began, want 0", got)
	}
	n := world.WaitNode(t, v.name, "one voluntary failure remembered", func(n *corev1.Node) bool {
		return protocol.ReadAgentState(n).Failures.Count == 1
	})
	if c := protocol.NodeInterruptions(n); len(c) != 0 {
		t.Errorf("the Node counts %v for a maintenance that never began", c)
	}
}

// TestOpportunisticTriggerRecheckedBeforeActing: the agent acts on a
// trigger the aggregator wrote only if the node is still idle, the trigger
// is fresh, and it was written for the pending notice. Otherwise the
// trigger is answered with a Warning Event saying why and removed, and
// nothing is drained: the node stays in service, its pod stays, Compute
// Engine is not asked.
func TestOpportunisticTriggerRecheckedBeforeActing(t *testing.T) {
	testworld.Need(t)
	v, r := manualVM(t, "agent-opportunistic-0")
	ns := world.Namespace(t)
	scheduled := getNode(t, v.name).Labels[protocol.LabelScheduledMaintenanceTime]
	trigger := func(ms protocol.MaintenanceState) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n := getNode(t, v.name)
			protocol.WriteTrigger(n, ms)
			_, err := world.Client.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	rejectedFor := func(outcome, saying string) {
		t.Helper()
		world.WaitNode(t, v.name, "trigger answered", triggerGone)
		err := wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return testutil.ToFloat64(r.metrics.ManualTriggers.WithLabelValues(outcome)) == 1, nil
		})
		if err != nil {
			t.Fatalf("manual_triggers_total{%s} never 1", outcome)
		}
		// Events are recorded asynchronously, after the Node's update.
		world.WaitEvent(t, v.name, protocol.EventManualRejected, saying)
		n := getNode(t, v.name)
		if n.Spec.Unschedulable || protocol.HasTaint(n) || n.Labels[protocol.LabelActiveMaintenance] != "" || n.Annotations[protocol.AnnotationMaintenanceState] != "" {
			t.Errorf("a rejected trigger changed the node: unschedulable %t, labels %v", n.Spec.Unschedulable, n.Labels)
		}
		if len(v.emu.Calls()) != 0 {
			t.Errorf("Compute Engine was asked %d times", len(v.emu.Calls()))
		}
	}

	// A training pod landed after the aggregator decided.
	trainer := makePod(ns, "trainer", v.name, 30, time.Second)
	trainer.Spec.Containers[0].Resources.Requests = corev1.ResourceList{testworld.ResourceGPU: resource.MustParse("8")}
	trainer.Spec.Containers[0].Resources.Limits = trainer.Spec.Containers[0].Resources.Requests
	createPod(t, trainer)
	world.WaitNode(t, v.name, "busy", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationBusy] == protocol.BusyAccelerators })
	trigger(protocol.MaintenanceState{OpportunisticTriggered: true, TriggeredAt: time.Now().UTC().Format(time.RFC3339), ScheduledTime: scheduled})
	rejectedFor(protocol.ManualNotIdle, "no longer idle")
	if podGone(t, ns, "trainer") {
		t.Fatal("the training pod was drained")
	}

	// Idle again: a trigger written long ago, then one for another notice.
	zero := int64(0)
	if err := world.Client.CoreV1().Pods(ns).Delete(testworld.Ctx(t, 10*time.Second), "trainer", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	world.WaitNode(t, v.name, "idle", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationIdleSince] != "" })
	trigger(protocol.MaintenanceState{OpportunisticTriggered: true, TriggeredAt: time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), ScheduledTime: scheduled})
	rejectedFor(protocol.ManualStaleTrigger, "more than 5m0s ago")
	trigger(protocol.MaintenanceState{OpportunisticTriggered: true, TriggeredAt: time.Now().UTC().Format(time.RFC3339), ScheduledTime: "1700000000"})
	rejectedFor(protocol.ManualNoticeChanged, `written for the maintenance scheduled at "1700000000"`)
}

// TestVoluntaryDrainHonoursPDBsToTheEnd: a manual maintenance's drain
// meets a PodDisruptionBudget that never allows: the pod is never deleted;
// at the drain deadline the maintenance is given up (Warning Event naming
// the pod, metric), Compute Engine is not asked, and the node is back in
// service.
func TestVoluntaryDrainHonoursPDBsToTheEnd(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-voluntary-0")
	withCompute(t, v)
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 20, 2, 0, 0, 0, time.UTC), 4*time.Hour))
	cfg := lifecycle.DefaultConfig
	cfg.ManualDrainTimeout = 20 * time.Second
	r := startAgent(t, v, cfg)
	world.WaitNode(t, v.name, "scheduled label", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	ns := world.Namespace(t)
	p := makePod(ns, "guarded", v.name, 5, time.Second)
	p.Labels = map[string]string{"app": "guarded"}
	createPod(t, p)
	world.Budget(t, ns, "guarded", p.Labels, intstr.FromInt32(1), "1 healthy pod", healthy(1))

	setTrigger(t, v.name, protocol.TriggerValue, true)
	world.WaitNode(t, v.name, "ONGOING", func(n *corev1.Node) bool { return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueOngoing })
	world.WaitEvent(t, v.name, protocol.EventBlocked)
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, 90*time.Second), 100*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(r.metrics.ManualTriggers.WithLabelValues(protocol.ManualAbandoned)) == 1, nil
	})
	if err != nil {
		t.Fatal("the voluntary drain was never given up")
	}
	n := world.WaitNode(t, v.name, "back in service", func(n *corev1.Node) bool {
		return !n.Spec.Unschedulable && !protocol.HasTaint(n) && n.Labels[protocol.LabelActiveMaintenance] == "" && triggerGone(n)
	})
	if n.Labels[protocol.LabelScheduledMaintenanceTime] == "" {
		t.Error("the pending notice is no longer mirrored")
	}
	// Events are recorded asynchronously, after the Node's update.
	world.WaitEvent(t, v.name, protocol.EventManualAbandoned, ns+"/guarded")
	if msgs := eventMessages(t, v.name, protocol.EventManualAbandoned); len(msgs) != 1 {
		t.Errorf("%s Events %q, want one", protocol.EventManualAbandoned, msgs)
	}
	if podGone(t, ns, "guarded") || len(v.emu.Calls()) != 0 {
		t.Errorf("pod gone %t, performMaintenance calls %d; want the pod kept and no call", podGone(t, ns, "guarded"), len(v.emu.Calls()))
	}
	if got := testworld.Settled(t, r.metrics.Escalations, 0); got != 0 {
		t.Errorf("%v escalations in a voluntary drain", got)
	}
}
