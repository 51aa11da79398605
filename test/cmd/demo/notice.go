package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

// checkpointLead is the trainer's checkpoint lead in the demo: told that
// the maintenance starts, then asked to stop this much later.
const checkpointLead = "5s"

// trainerOn is the trainer pod on v.
func (d *demo) trainerOn(ctx context.Context, v *vms.VM) (*corev1.Pod, error) {
	list, err := d.world.Client.CoreV1().Pods(workloads).List(ctx, metav1.ListOptions{LabelSelector: "app=trainer", FieldSelector: "spec.nodeName=" + v.Name})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			return &list.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no trainer pod on %s", v.Name)
}

// showNotice waits until the trainer on v carries the notice, and says it.
func (d *demo) showNotice(ctx context.Context, v *vms.VM) error {
	var text, name string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := d.trainerOn(ctx, v)
		if err != nil {
			return false, nil
		}
		name, text = p.Name, p.Annotations[protocol.PodAnnotationNotice]
		return text != "", nil
	})
	if err != nil {
		return fmt.Errorf("the trainer on %s was never told: %w", v.Name, err)
	}
	d.say("   every pod is told too, without API access (a downward API file): pod %s/%s carries %s:", workloads, name, protocol.PodAnnotationNotice)
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		d.say("     %s", line)
	}
	return nil
}

// checkpointLoop runs examples/checkpoint/loop.sh, the example training
// loop, against a file the demo keeps equal to the trainer's notice on v,
// as the kubelet keeps a downward API file. Its output is said as it
// comes; stop ends it and waits for it.
func (d *demo) checkpointLoop(ctx context.Context, v *vms.VM) (stop func(), err error) {
	script, err := findExample("examples/checkpoint/loop.sh")
	if err != nil {
		return nil, err
	}
	p, err := d.trainerOn(ctx, v)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "demo-checkpoint-")
	if err != nil {
		return nil, err
	}
	notice, stopFile := filepath.Join(dir, "notice"), filepath.Join(dir, "stop")
	lctx, cancel := context.WithCancel(ctx)
	mirrored := make(chan struct{})
	go func() { // the kubelet's part: the annotation, as a file
		defer close(mirrored)
		last := "\x00"
		for lctx.Err() == nil {
			if cur, err := d.world.Client.CoreV1().Pods(workloads).Get(lctx, p.Name, metav1.GetOptions{}); err == nil {
				if text := cur.Annotations[protocol.PodAnnotationNotice]; text != last {
					_ = os.WriteFile(notice, []byte(text), 0o644)
					last = text
				}
			}
			select {
			case <-lctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	// The job's own functions: a training step, and a checkpoint.
	program := fmt.Sprintf(`train_one_step() { sleep 0.2; [ ! -e %q ]; }
save_checkpoint() { echo "checkpointed at a step boundary: maintenance $MAINTENANCE_PHASE, eviction at $MAINTENANCE_EVICT_AT_TIME"; }
. %q`, stopFile, script)
	cmd := exec.Command("sh", "-c", program)
	cmd.Env = append(os.Environ(), "NOTICE="+notice)
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, err
	}
	d.say("   the trainer %s/%s runs examples/checkpoint/loop.sh, reading its notice file", workloads, p.Name)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			d.say("   %s: %s", p.Name, sc.Text())
		}
	}()
	return func() {
		_ = os.WriteFile(stopFile, nil, 0o644)
		<-read
		_ = cmd.Wait()
		cancel()
		<-mirrored
		_ = os.RemoveAll(dir)
	}, nil
}

// findExample finds path in the repository, from the working directory up.
func findExample(path string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, path)); err == nil {
			return filepath.Join(dir, path), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New(path + " not found: run the demo from the repository (make demo)")
		}
		dir = parent
	}
}
