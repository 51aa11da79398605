package kube

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"
)

// healthLog records what an Informer tells its WatchRecorder.
type healthLog struct{ told chan bool }

func (h healthLog) WatchHealth(_ string, healthy bool) { h.told <- healthy }

// TestInformerSaysWhenItsWatchFails: a list the API server refuses (403)
// makes the informer unhealthy, with the error, once it has failed for
// longer than the bound; the list that succeeds next makes it healthy,
// and the recorder is told of both.
func TestInformerSaysWhenItsWatchFails(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	var refuse atomic.Bool
	refuse.Store(true)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("RBAC: denied"))
	log := healthLog{told: make(chan bool, 16)}
	w := watch.NewFake()
	inf := NewInformer(ListWatch{
		Object: &corev1.Pod{},
		List: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			if refuse.Load() {
				return nil, forbidden
			}
			return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
		},
		Watch:      func(context.Context, metav1.ListOptions) (watch.Interface, error) { return w, nil },
		Unstreamed: true,
		Recorder:   log,
	}, InformerOptions{Name: "pods", Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inf.Run(ctx)

	if healthy := <-log.told; healthy {
		t.Fatal("told healthy; want the refused list told as a failure")
	}
	if err := inf.Unhealthy(time.Minute); err != nil {
		t.Errorf("unhealthy at once: %v; want healthy until it has failed for the bound", err)
	}
	clk.SetTime(clk.Now().Add(61 * time.Second))
	err := inf.Unhealthy(time.Minute)
	if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "the pods watch has failed for 1m1s") {
		t.Errorf("Unhealthy = %v; want the pods watch failed for 1m1s, forbidden", err)
	}

	refuse.Store(false)
	for healthy := range log.told {
		if healthy {
			break
		}
	}
	if err := inf.Unhealthy(time.Minute); err != nil {
		t.Errorf("after a list that succeeded: %v; want healthy", err)
	}
}
