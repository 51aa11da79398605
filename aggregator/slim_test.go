package aggregator

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// gkeNode is node i of fleetNodes as a GKE accelerator pool's node is
// served by the API server (shaped after an A3 node's: its labels, GKE's
// and the node problem detector's conditions, allocatable, the image list,
// managed fields; a kubelet of 1.30, before GKE's own handler takes host
// maintenance), decoded from its JSON as an informer decodes it, so that
// no two nodes share a string.
func gkeNode(i int) *corev1.Node {
	n := fleetNode(i)
	pool := fmt.Sprintf("pool-%02d", i/100)
	for k, v := range map[string]string{
		"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/instance-type": "a3-highgpu-8g", "beta.kubernetes.io/os": "linux",
		"cloud.google.com/gke-accelerator": "nvidia-h100-80gb", "cloud.google.com/gke-accelerator-count": "8",
		"cloud.google.com/gke-boot-disk": "pd-ssd", "cloud.google.com/gke-container-runtime": "containerd",
		"cloud.google.com/gke-cpu-scaling-level": "208", "cloud.google.com/gke-gpu-driver-version": "latest",
		"cloud.google.com/gke-logging-variant": "DEFAULT", "cloud.google.com/gke-max-pods-per-node": "110",
		"cloud.google.com/gke-memory-gb-scaling-level": "1872", "cloud.google.com/gke-nodepool": pool,
		"cloud.google.com/gke-os-distribution": "cos", "cloud.google.com/gke-placement-group": "a3-compact",
		"cloud.google.com/gke-provisioning": "reservation", "cloud.google.com/gke-stack-type": "IPV4",
		"cloud.google.com/machine-family": "a3", "cloud.google.com/private-node": "true",
		"cloud.google.com/reservation-name": "a3-reservation-us-central1", "failure-domain.beta.kubernetes.io/region": "us-central1",
		"failure-domain.beta.kubernetes.io/zone": "us-central1-a", "iam.gke.io/gke-metadata-server-enabled": "true",
		"kubernetes.io/arch": "amd64", "kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux",
		"node.kubernetes.io/instance-type": "a3-highgpu-8g", "node.kubernetes.io/masq-agent-ds-ready": "true",
		"topology.gke.io/zone": "us-central1-a", "topology.kubernetes.io/region": "us-central1", "topology.kubernetes.io/zone": "us-central1-a",
		"cloud.google.com/gce-topology-block": "blk-0a1b2c", "cloud.google.com/gce-topology-subblock": "sblk-3d4e5f",
		"cloud.google.com/gce-topology-host": fmt.Sprintf("host-%08x", i),
	} {
		n.Labels[k] = v
	}
	lastLabels, _ := json.Marshal(n.Labels)
	for k, v := range map[string]string{
		"container.googleapis.com/instance_id":                   fmt.Sprint(7000000000000000000 + i),
		"csi.volume.kubernetes.io/nodeid":                        fmt.Sprintf(`{"pd.csi.storage.gke.io":"projects/p/zones/us-central1-a/instances/%s","filestore.csi.storage.gke.io":"%s"}`, n.Name, n.Name),
		"node.alpha.kubernetes.io/ttl":                           "0",
		"node.gke.io/last-applied-node-labels":                   string(lastLabels),
		"node.gke.io/last-applied-node-taints":                   "nvidia.com/gpu=present:NoSchedule",
		"volumes.kubernetes.io/controller-managed-attach-detach": "true",
		protocol.AnnotationInterruptions:                         `{"` + protocol.HostMaintenance.Key() + `":2,"` + protocol.Preemption.Key() + `":1}`,
		protocol.AnnotationLastBootID:                            fmt.Sprintf("%08x-1c2d-4e5f-8a9b-%012x", i, i),
		protocol.AnnotationKubeletVersion:                        "v1.30.14-gke.1096000",
	} {
		n.Annotations[k] = v
	}
	n.Spec = corev1.NodeSpec{PodCIDR: "10.64.3.0/24", PodCIDRs: []string{"10.64.3.0/24"}, ProviderID: "gce://p/us-central1-a/" + n.Name,
		Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}}
	at := metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	n.Status.Conditions = nil
	for _, c := range []struct{ t, reason, msg string }{
		{"FrequentUnregisterNetDevice", "NoFrequentUnregisterNetDevice", "node is functioning properly"},
		{"FrequentKubeletRestart", "NoFrequentKubeletRestart", "kubelet is functioning properly"},
		{"FrequentDockerRestart", "NoFrequentDockerRestart", "docker is functioning properly"},
		{"FrequentContainerdRestart", "NoFrequentContainerdRestart", "containerd is functioning properly"},
		{"KernelDeadlock", "KernelHasNoDeadlock", "kernel has no deadlock"},
		{"ReadonlyFilesystem", "FilesystemIsNotReadOnly", "Filesystem is not read-only"},
		{"CorruptDockerOverlay2", "NoCorruptDockerOverlay2", "docker overlay2 is functioning properly"},
		{"NetworkUnavailable", "RouteCreated", "NodeController create implicit route"},
		{"MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
		{"DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
		{"PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
	} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeConditionType(c.t), Status: corev1.ConditionFalse,
			Reason: c.reason, Message: c.msg, LastHeartbeatTime: at, LastTransitionTime: at})
	}
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status", LastHeartbeatTime: at, LastTransitionTime: at})
	resources := corev1.ResourceList{"cpu": resource.MustParse("207"), "memory": resource.MustParse("1871Gi"), "ephemeral-storage": resource.MustParse("6Ti"),
		"hugepages-1Gi": resource.MustParse("0"), "hugepages-2Mi": resource.MustParse("0"), "pods": resource.MustParse("110"), "nvidia.com/gpu": resource.MustParse("8")}
	n.Status.Capacity, n.Status.Allocatable = resources, resources.DeepCopy()
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.128.0.17"}, {Type: corev1.NodeHostName, Address: n.Name}}
	n.Status.NodeInfo = corev1.NodeSystemInfo{MachineID: fmt.Sprintf("%032x", i), SystemUUID: fmt.Sprintf("%08x-aaaa-bbbb-cccc-%012x", i, i),
		BootID: fmt.Sprintf("%08x-1c2d-4e5f-8a9b-%012x", i, i), KernelVersion: "6.6.56+", OSImage: "Container-Optimized OS from Google",
		ContainerRuntimeVersion: "containerd://1.7.24", KubeletVersion: "v1.30.14-gke.1096000",
		OperatingSystem: "linux", Architecture: "amd64"}
	for j := range 40 {
		name := fmt.Sprintf("us-docker.pkg.dev/team-%02d/ml/trainer-image-%02d", j%7, j)
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{SizeBytes: int64(1e9 + j*7919),
			Names: []string{name + "@sha256:" + strings.Repeat(fmt.Sprintf("%x", j%16), 64), name + ":v1." + fmt.Sprint(j)}})
	}
	for _, m := range []string{"kubelet", "kube-controller-manager", "gke-node-controller", "node-problem-detector", "maintenance-handler-agent", "maintenance-handler-aggregator"} {
		fields := `{"f:metadata":{"f:annotations":{` + strings.Repeat(`"f:example.com/key-`+m+`":{},`, 30) + `".":{}},"f:labels":{` + strings.Repeat(`"f:example.com/label":{},`, 20) + `".":{}}},"f:status":{"f:conditions":{` + strings.Repeat(`"k:{\"type\":\"Ready\"}":{".":{},"f:lastHeartbeatTime":{},"f:message":{}},`, 12) + `".":{}}}}`
		n.ManagedFields = append(n.ManagedFields, metav1.ManagedFieldsEntry{Manager: m, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
			Time: &at, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)})
	}
	raw, err := json.Marshal(n)
	if err != nil {
		panic(err)
	}
	var decoded corev1.Node
	if err := json.Unmarshal(raw, &decoded); err != nil {
		panic(err)
	}
	return &decoded
}

// TestSlimNodeKeepsWhatTheFleetReads: the fleet reads a slimmed GKE node as
// it reads the whole one, and the slimmed one is a fraction of its size.
func TestSlimNodeKeepsWhatTheFleetReads(t *testing.T) {
	full := gkeNode(7)
	slim := slimNode(full.DeepCopy()).(*corev1.Node)
	g := protocol.Grouping{PoolLabel: protocol.LabelNodePool}
	if a, b := fleet.NodeOf(full, g), fleet.NodeOf(slim, g); !reflect.DeepEqual(a, b) {
		t.Errorf("the fleet reads the slim node otherwise:\n%+v\n%+v", a, b)
	} else if len(a.Unreadable) > 0 || a.GKEHandled || !a.NoticePresent {
		t.Errorf("the GKE-shaped node is not one the aggregator maintains: %+v", a)
	}
	if !fleet.NodeReady(slim) || slim.Status.NodeInfo.KubeletVersion != full.Status.NodeInfo.KubeletVersion || len(slim.Status.Conditions) != len(full.Status.Conditions) {
		t.Errorf("the slim node lost what the aggregator reads: %+v", slim.Status)
	}
	fullJSON, _ := json.Marshal(full)
	slimJSON, _ := json.Marshal(slim)
	if len(slimJSON)*2 > len(fullJSON) {
		t.Errorf("slimmed %d bytes of JSON to %d, want under half", len(fullJSON), len(slimJSON))
	}
}

// BenchmarkNodeCache: the heap the aggregator's node cache holds for 5,000,
// 20,000 and 65,000 GKE-shaped Nodes as its informer keeps them (slimmed),
// and for 5,000 whole ones, as it kept them before. Prints MiB per size.
func BenchmarkNodeCache(b *testing.B) {
	for _, c := range []struct {
		size int
		slim bool
	}{{5000, false}, {5000, true}, {20000, true}, {65000, true}} {
		b.Run(fmt.Sprintf("nodes=%d/slim=%t", c.size, c.slim), func(b *testing.B) {
			var heap float64
			for b.Loop() {
				runtime.GC()
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				held := make([]*corev1.Node, c.size)
				for i := range held {
					held[i] = gkeNode(i)
					if c.slim {
						held[i] = slimNode(held[i]).(*corev1.Node)
					}
				}
				runtime.GC()
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				runtime.KeepAlive(held)
				heap = float64(after.HeapAlloc-before.HeapAlloc) / (1 << 20)
			}
			b.ReportMetric(heap, "heap-MiB")
			fmt.Printf("node cache: %d GKE-shaped nodes (slimmed: %t) hold %.0f MiB of heap\n", c.size, c.slim, heap)
		})
	}
}
