package protocol

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestUnreadableNamesEachKey: what the agent writes reads; every key
// with a value the product cannot read is named, and only those.
func TestUnreadableNamesEachKey(t *testing.T) {
	readable := map[string]string{
		AnnotationPhase:               "Draining",
		AnnotationReason:              "manual",
		AnnotationStarted:             "2026-11-25T10:00:00Z",
		AnnotationDeadline:            "2026-11-25T11:00:00.5Z",
		AnnotationIdleSince:           "2026-11-25T09:00:00Z",
		AnnotationBegun:               "true",
		AnnotationBusy:                BusyAccelerators,
		AnnotationDrain:               string(DrainDone),
		AnnotationInterruptions:       `{"MaintenanceEvent/HW/SW Maintenance":2}`,
		AnnotationVoluntaryFailures:   `{"count":1}`,
		AnnotationMaintenanceState:    `{"opportunistic-triggered":true}`,
		AnnotationUpcomingMaintenance: `{"maintenance_status":"PENDING","type":"SCHEDULED","window_start_time":"2026-12-01T00:00:00Z"}`,
		AnnotationSliceMaintenance:    `{"slice":"s","cause":"h0","reason":"preemption","started":"2026-11-25T10:00:00Z","deadline":"2026-11-25T10:00:30Z"}`,
		AnnotationRequestID:           "anything",
		AnnotationComputeCall:         `{"id":"r1","method":"performMaintenance"}`,
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: readable}}
	if got := Unreadable(n); len(got) != 0 {
		t.Fatalf("what the agent writes: %v unreadable", got)
	}
	garbage := map[string]string{
		AnnotationPhase:               "Rebooting",
		AnnotationReason:              "because",
		AnnotationStarted:             "yesterday",
		AnnotationDeadline:            "9999999999",
		AnnotationIdleSince:           "",
		AnnotationBegun:               "yes",
		AnnotationBusy:                "very",
		AnnotationDrain:               "half",
		AnnotationInterruptions:       `{"MaintenanceEvent/HW/SW Maintenance":-1}`,
		AnnotationVoluntaryFailures:   `[`,
		AnnotationMaintenanceState:    `"x"`,
		AnnotationUpcomingMaintenance: `{"maintenance_status":"PENDING","window_start_time":"soon"}`,
		AnnotationSliceMaintenance:    `{"slice":"s"}`,
		AnnotationRepairs:             `[]`,
		AnnotationComputeCall:         `{"id":"r1","method":"deleteInstance"}`,
	}
	for key, bad := range garbage {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{}}}
		for k, v := range readable {
			n.Annotations[k] = v
		}
		n.Annotations[key] = bad
		if got := Unreadable(n); !slices.Equal(got, []string{key}) {
			t.Errorf("%s=%q: unreadable %v, want just that key", key, bad, got)
		}
	}
}
