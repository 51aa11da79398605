package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

// realPool is the node pool of the demo's real node, apart from the
// simulated pool so that the aggregator's decisions there stay as they
// were.
const realPool = "a3-real"

// realTrainer is the trainer on the real node: examples/checkpoint/loop.sh
// in a real container, reading the notice file the kubelet keeps from the
// pod's annotation, and stopping on SIGTERM after its checkpoint.
const realTrainerFunctions = `train_one_step() { sleep 0.2; }
save_checkpoint() { echo "checkpointed at a step boundary: maintenance $MAINTENANCE_PHASE, eviction at $MAINTENANCE_EVICT_AT_TIME"; }
trap 'echo "SIGTERM received: stopping, the checkpoint is saved"; exit 0' TERM
`

// setUpRealNode starts one real node (a kubelet and containerd) with its
// emulated metadata server, its agent, and the real trainer, where the
// machine allows it; otherwise it says why and the demo runs without it.
func (d *demo) setUpRealNode(ctx context.Context) error {
	if err := testworld.RealNodeSupport(); err != nil {
		fmt.Printf("demo: no real node on this machine (%v); the scenario runs on simulated nodes only\n", err)
		return nil
	}
	dir, err := testworld.NodeDir()
	if err != nil {
		return err
	}
	if !testworld.Built(dir) {
		fmt.Println("demo: first run with a real node: building the kubelet and containerd from Go modules; this takes a few minutes, once")
	}
	if err := testworld.BuildNode(ctx, dir, os.Stdout); err != nil {
		return err
	}
	name := "gke-" + realPool + "-0"
	n, err := d.world.StartRealNode(ctx, dir, testworld.RealNodeOptions{Name: name, Progress: os.Stdout, Labels: map[string]string{
		testworld.LabelNodePool: realPool, testworld.LabelGPUAccelerator: "nvidia-h100-80gb",
	}})
	if err != nil {
		return err
	}
	d.real = n
	if err := n.ImportShell(ctx); err != nil {
		return err
	}
	v := &vms.VM{Name: name, Emu: gceemu.New(gceemu.Config{Name: name, Project: "demo-project", Zone: "us-central1-a"})}
	if err := v.Emu.Start(); err != nil {
		return err
	}
	d.fleet.VMs = append(d.fleet.VMs, v)
	if err := d.fleet.StartAgent(v); err != nil {
		return err
	}
	d.realVM = v
	loop, err := findExample("examples/checkpoint/loop.sh")
	if err != nil {
		return err
	}
	script, err := os.ReadFile(loop)
	if err != nil {
		return err
	}
	c := d.world.Client
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "real-trainer"}, Data: map[string]string{
		"functions.sh": realTrainerFunctions, "loop.sh": string(script),
	}}
	if _, err := c.CoreV1().ConfigMaps(workloads).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return err
	}
	g := int64(d.grace)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "real-trainer", Annotations: map[string]string{protocol.PodAnnotationCheckpointLead: checkpointLead}},
		Spec: corev1.PodSpec{
			NodeName:                      name,
			TerminationGracePeriodSeconds: &g,
			Containers: []corev1.Container{{
				Name: "train", Image: testworld.ShellImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sh", "-c", ". /app/functions.sh && . /app/loop.sh"},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "app", MountPath: "/app", ReadOnly: true},
					{Name: "maintenance", MountPath: "/etc/maintenance", ReadOnly: true},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "app", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "real-trainer"}}}},
				{Name: "maintenance", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{{
					Path: "notice", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + protocol.PodAnnotationNotice + "']"},
				}}}}},
			},
		},
	}
	if _, err := c.CoreV1().Pods(workloads).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(workloads).Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			d.realPod = p
			return true, nil
		}
		return false, nil
	})
}

// realScenario: host maintenance on the real node; the trainer's own
// output (its container's log) shows it checkpoint when told and stop on
// a real SIGTERM.
func (d *demo) realScenario(ctx context.Context) error {
	if d.real == nil {
		return nil
	}
	v := d.realVM
	d.say("== 8. A real node: %s runs a kubelet and containerd; its trainer is a real container running", v.Name)
	d.say("   examples/checkpoint/loop.sh on the notice file the kubelet keeps from the pod's annotation")
	d.say("   Compute Engine starts host maintenance there: the trainer is told, checkpoints in its %s lead, then gets a real SIGTERM", checkpointLead)
	stop, err := d.tailContainer(d.real.ContainerLog(d.realPod, "train", 0), d.realPod.Name)
	if err != nil {
		return err
	}
	defer stop()
	v.Emu.SetMaintenanceEvent(gceemu.EventTerminate)
	return d.waitNode(ctx, v, 5*time.Minute, active(protocol.ValueTerminating))
}

// tailContainer says each line a container writes to its log file (the
// kubelet's format: time, stream, tag, text) until stop, which reads to
// the end first. The file stays open, so lines written just before the
// kubelet removes it are read too.
func (d *demo) tailContainer(path, name string) (stop func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		r := bufio.NewReader(f)
		var partial string
		for {
			line, err := r.ReadString('\n')
			partial += line
			if err == nil {
				if fields := strings.SplitN(strings.TrimSuffix(partial, "\n"), " ", 4); len(fields) == 4 {
					d.say("   %s (container output): %s", name, fields[3])
				}
				partial = ""
				continue
			}
			if err != io.EOF {
				return
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() {
		time.Sleep(300 * time.Millisecond) // the last lines the runtime is writing
		close(done)
		<-finished
		f.Close()
	}, nil
}
