package lifecycle

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/google/go-cmp/cmp"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

func TestIdleness(t *testing.T) {
	yes := true
	gpu := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}}}}}
	}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{}}}}
	ds := gpu("dcgm")
	ds.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "dcgm", Controller: &yes}}
	mirror := gpu("static")
	mirror.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
	done := gpu("finished")
	done.Status.Phase = corev1.PodSucceeded
	tpuInit := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "warmup"}, Spec: corev1.PodSpec{InitContainers: []corev1.Container{{
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"google.com/tpu": resource.MustParse("4")}}}}, Containers: []corev1.Container{{}}}}
	pinned := plain.DeepCopy()
	pinned.Annotations = map[string]string{protocol.PodAnnotationSafeToEvict: "false"}

	tests := []struct {
		name string
		pods []*corev1.Pod
		idle bool
		busy string
	}{
		{"no pods", nil, true, ""},
		{"a pod without accelerators", []*corev1.Pod{plain}, true, ""},
		{"DaemonSet, mirror and finished pods with GPUs", []*corev1.Pod{ds, mirror, done}, true, ""},
		{"a GPU pod", []*corev1.Pod{plain, gpu("trainer")}, false, protocol.BusyAccelerators},
		{"a TPU init container", []*corev1.Pod{tpuInit}, false, protocol.BusyAccelerators},
		{"safe-to-evict false wins", []*corev1.Pod{gpu("trainer"), pinned}, false, protocol.BusySafeToEvict},
	}
	for _, tc := range tests {
		idle, busy := Idleness(tc.pods, true, []corev1.ResourceName{protocol.ResourceGPU, protocol.ResourceTPU}, noClaims)
		if idle != tc.idle || busy != tc.busy {
			t.Errorf("%s: idleness = %t %q, want %t %q", tc.name, idle, busy, tc.idle, tc.busy)
		}
	}
	if idle, _ := Idleness([]*corev1.Pod{tpuInit}, true, []corev1.ResourceName{protocol.ResourceGPU}, noClaims); !idle {
		t.Error("a TPU pod made the node busy when only GPUs count")
	}
}

// TestIdlenessWithoutAccelerators: on a node without accelerators (an
// H4D VM, say), any workload pod keeps it busy; DaemonSet, mirror,
// finished and kube-system pods do not.
func TestIdlenessWithoutAccelerators(t *testing.T) {
	yes := true
	pod := func(ns, name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{}}}}
	}
	ds := pod("monitoring", "node-exporter")
	ds.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "node-exporter", Controller: &yes}}
	done := pod("hpc", "finished")
	done.Status.Phase = corev1.PodFailed
	pinned := pod("kube-system", "pinned")
	pinned.Annotations = map[string]string{protocol.PodAnnotationSafeToEvict: "false"}
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		busy string
	}{
		{"no pods", nil, ""},
		{"DaemonSet, finished and kube-system pods", []*corev1.Pod{ds, done, pod(metav1.NamespaceSystem, "kube-dns")}, ""},
		{"a workload pod", []*corev1.Pod{ds, pod("hpc", "solver")}, protocol.BusyWorkload},
		{"safe-to-evict false wins", []*corev1.Pod{pod("hpc", "solver"), pinned}, protocol.BusySafeToEvict},
	} {
		idle, busy := Idleness(tc.pods, false, []corev1.ResourceName{protocol.ResourceGPU}, noClaims)
		if idle != (tc.busy == "") || busy != tc.busy {
			t.Errorf("%s: idleness = %t %q, want busy %q", tc.name, idle, busy, tc.busy)
		}
	}
}

func noClaims(*corev1.Pod) bool { return false }

func TestStepIdleSince(t *testing.T) {
	o := obs(quiet())
	o.PodsKnown, o.Idle = true, true
	d := Step(cfg, State{}, o)
	if !d.State.IdleSince.Equal(t0) || d.State.Busy != "" {
		t.Fatalf("idle: %+v", d.State)
	}
	later := o
	later.Now = t0.Add(time.Hour)
	if again := Step(cfg, d.State, later); !again.State.IdleSince.Equal(t0) {
		t.Errorf("idle since moved to %s while still idle", again.State.IdleSince)
	}
	busy := later
	busy.Idle, busy.Busy = false, protocol.BusyAccelerators
	b := Step(cfg, d.State, busy)
	if d := cmp.Diff(State{Phase: protocol.PhaseIdle, LastEvent: "NONE", Busy: protocol.BusyAccelerators}, b.State, ignoreAccounting); d != "" {
		t.Errorf("busy (-want +got):\n%s", d)
	}
	unknown := busy
	unknown.PodsKnown = false
	if u := Step(cfg, d.State, unknown); !u.State.IdleSince.Equal(t0) {
		t.Error("unknown pods changed idleness")
	}
}

// TestKindOf: what a pod is to its node's maintenance, as the drain's
// groups and idleness read it.
func TestKindOf(t *testing.T) {
	yes := true
	pod := func(ns string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}}
	}
	ds := pod(metav1.NamespaceSystem)
	ds.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ds", Controller: &yes}}
	owned := pod("ml")
	owned.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ds"}} // not its controller
	mirror := pod(metav1.NamespaceSystem)
	mirror.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
	done := pod("ml")
	done.Status.Phase = corev1.PodSucceeded
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want PodKind
	}{
		{"a workload", pod("ml"), PodWorkload},
		{"kube-system", pod(metav1.NamespaceSystem), PodSystem},
		{"a DaemonSet's, in kube-system", ds, PodDaemonSet},
		{"owned by a DaemonSet that is not its controller", owned, PodWorkload},
		{"a mirror pod", mirror, PodNone},
		{"finished", done, PodNone},
	} {
		if got := KindOf(tc.pod); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestPodGroupsOf: the pod groups of the pods that run, but for mirror
// pods, finished pods and pods being deleted; the step writes them, and
// keeps them when the node goes back in service.
func TestPodGroupsOf(t *testing.T) {
	pod := func(name, group string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name}}
		if group != "" {
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
		}
		return p
	}
	mirror := pod("static", "forged")
	mirror.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
	done := pod("done", "finished")
	done.Status.Phase = corev1.PodFailed
	going := pod("going", "leaving")
	going.DeletionTimestamp = &metav1.Time{Time: t0}
	got := PodGroupsOf([]*corev1.Pod{pod("web", ""), pod("train-1", "train"), pod("train-0", "train"), mirror, done, going})
	want := []protocol.PodGroupClaim{{Namespace: "ml", PodGroup: "train", Pod: "train-0"}}
	if !cmp.Equal(got, want) {
		t.Fatalf("PodGroupsOf: %v, want %v", got, want)
	}
	o := obs(quiet())
	o.PodsKnown, o.PodGroups = true, got
	d := stepChecked(t, cfg, State{}, o)
	if !cmp.Equal(d.State.PodGroups, want) {
		t.Errorf("idle: the state's pod groups %v, want %v", d.State.PodGroups, want)
	}
	st := draining(protocol.ReasonHostMaintenance, time.Hour)
	st.PodGroups = want
	if back := idleState(st); !cmp.Equal(back.PodGroups, want) {
		t.Errorf("back in service: %v, want the pod groups kept", back.PodGroups)
	}
}
