package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// nodePods fills one node of the benchmarks with pods that kwok runs and
// stops, each after its grace.
type nodePods struct {
	b    testing.TB
	node string
}

// pod is a bare pod in ns on the node that takes grace seconds to stop.
func (f nodePods) pod(ns, name string, grace int64, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels,
			Annotations: map[string]string{testworld.PodDeleteDelayAnnotation: fmt.Sprintf("%ds", grace)}},
		Spec: corev1.PodSpec{NodeName: f.node, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "main", Image: "registry.invalid/app:1"}}},
	}
}

func (f nodePods) create(p *corev1.Pod) {
	f.b.Helper()
	if _, err := world.Client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		f.b.Fatal(err)
	}
}

// system creates n kube-system pods with 5 s, removed when the benchmark
// ends (no test namespace holds them).
func (f nodePods) system(n int) {
	for i := range n {
		p := f.pod(metav1.NamespaceSystem, fmt.Sprintf("sys-%d-%s", i, f.node), 5, nil)
		f.create(p)
		f.b.Cleanup(func() {
			zero := int64(0)
			_ = world.Client.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		})
	}
}

// daemonSets creates n DaemonSets in ns, each with one pod on the node
// (2 s, tolerating every taint).
func (f nodePods) daemonSets(ns string, n int) {
	f.b.Helper()
	for i := range n {
		labels := map[string]string{"ds": fmt.Sprintf("ds-%d", i)}
		tmpl := f.pod(ns, "", 2, labels)
		tmpl.Spec.NodeName = ""
		tmpl.Spec.NodeSelector = map[string]string{corev1.LabelHostname: f.node}
		tmpl.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		if _, err := world.Client.AppsV1().DaemonSets(ns).Create(context.Background(), &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ds-%d", i)},
			Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}},
		}, metav1.CreateOptions{}); err != nil {
			f.b.Fatal(err)
		}
	}
}

// waitReady waits for n pods running and Ready on the node.
func (f nodePods) waitReady(n int) {
	f.b.Helper()
	poll(f.b, fmt.Sprintf("%d pods running on %s", n, f.node), 3*time.Minute, func() bool {
		pods, err := world.Client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + f.node})
		running := 0
		for _, p := range pods.Items {
			if err == nil && p.Status.Phase == corev1.PodRunning && testworld.PodReady(&p) {
				running++
			}
		}
		return running == n
	})
}
