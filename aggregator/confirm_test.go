package aggregator

import (
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestConfirmedCauseEndsWhenItsVMRunsAgain: a confirmed forced
// maintenance, read again, stays confirmed while its VM stops or runs in
// the start it had, and is confirmed no longer once the VM runs again,
// started after the maintenance began (its agent may never say it is
// back), without a refusal said for it.
func TestConfirmedCauseEndsWhenItsVMRunsAgain(t *testing.T) {
	started := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	a := &Aggregator{log: slog.New(slog.DiscardHandler), opts: Options{}.withDefaults()}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "v5p-1"}}
	for _, tc := range []struct {
		name string
		vm   lifecycle.VMNow
		want bool
	}{
		{name: "stopping", vm: lifecycle.VMNow{Status: "STOPPING", LastStart: started.Add(-time.Hour)}, want: true},
		{name: "running in its old start", vm: lifecycle.VMNow{Status: "RUNNING", LastStart: started.Add(-time.Hour)}, want: true},
		{name: "running again", vm: lifecycle.VMNow{Status: "RUNNING", LastStart: started.Add(10 * time.Minute)}, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &claim{reason: protocol.ReasonPreemption, started: started, confirmed: true}
			if again := a.settleLocked(n, cl, tc.vm, false, nil); again != confirmRecheck {
				t.Errorf("read again in %s, want %s", again, confirmRecheck)
			}
			if cl.confirmed != tc.want {
				t.Errorf("confirmed %t, want %t", cl.confirmed, tc.want)
			}
			if !tc.want && !cl.told {
				t.Error("a maintenance over would be said as refused")
			}
		})
	}
}
