package aggregator

import (
	"bufio"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/yaml"

	"github.com/maintenance-handler/maintenance-handler/kube"
)

// The cluster autoscaler removes idle nodes itself, and GKE documents
// opportunistic maintenance as incompatible with it. The aggregator finds
// the pools it manages in the autoscaler's status ConfigMap (written by
// the autoscaler unless --write-status-configmap=false; on GKE,
// kube-system/cluster-autoscaler-status), whose "status" key lists its
// node groups: YAML since cluster-autoscaler 1.30, text before. A node
// group is a managed instance group, whose instances (the nodes) are named
// after it: GKE's group gke-c-pool-1a2b3c4d-grp has the nodes
// gke-c-pool-1a2b3c4d-xxxx.

// autoscalerStatusKey is the status ConfigMap's key.
const autoscalerStatusKey = "status"

// autoscalerSource keeps the autoscaler's status ConfigMap by one watch.
type autoscalerSource struct {
	namespace, name string
	informer        *kube.Informer
}

// startAutoscalerSource watches namespace/name and waits until it has
// been read. Without permission to read it, it returns nil and why: no
// pool is then known to be autoscaled (say so, and carry on).
func (a *Aggregator) startAutoscalerSource(ctx context.Context, namespace, name string) (*autoscalerSource, error) {
	_, err := a.opts.Client.GetConfigMap(ctx, namespace, name)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	lw := a.opts.Client.ConfigMapListWatch(namespace, name)
	s := &autoscalerSource{namespace: namespace, name: name, informer: kube.NewInformer(lw, kube.InformerOptions{Name: "autoscaler", Logger: a.log.With("watch", "autoscaler status")})}
	s.informer.AddHandlers(kube.OnAnyChange(a.poke))
	if err := s.informer.Start(ctx); err != nil {
		return nil, fmt.Errorf("watch ConfigMap %s/%s: %w", namespace, name, err)
	}
	return s, nil
}

// groups are the node groups the status lists (none when there is no
// status).
func (s *autoscalerSource) groups() []string {
	if s == nil {
		return nil
	}
	obj, ok := s.informer.Get(s.namespace + "/" + s.name)
	if !ok {
		return nil
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return nil
	}
	return ParseAutoscalerStatus(cm.Data[autoscalerStatusKey])
}

// ParseAutoscalerStatus returns the node group names in the cluster
// autoscaler's status, in either of its formats: YAML (nodeGroups[].name)
// or the older text (a "Name:" line per group under "NodeGroups:").
func ParseAutoscalerStatus(status string) []string {
	var parsed struct {
		NodeGroups []struct {
			Name string `json:"name"`
		} `json:"nodeGroups"`
	}
	var out []string
	if yaml.Unmarshal([]byte(status), &parsed) == nil {
		for _, g := range parsed.NodeGroups {
			if g.Name != "" {
				out = append(out, g.Name)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	inGroups := false
	sc := bufio.NewScanner(strings.NewReader(status))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "NodeGroups:"):
			inGroups = true
		case trimmed != "" && line == trimmed:
			inGroups = false // another top-level section
		case inGroups && strings.HasPrefix(trimmed, "Name:"):
			if name := strings.TrimSpace(strings.TrimPrefix(trimmed, "Name:")); name != "" {
				out = append(out, name)
			}
		}
	}
	return out
}
