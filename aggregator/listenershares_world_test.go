package aggregator_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestListenersSharePerNode: the aggregator as shipped, and two Nodes
// whose pod ranges are 127.0.1.0/24 and 127.0.2.0/24. Sixteen pods of the
// first node, each from an address of its range, hold idle connections to
// the aggregator's port: a seventeenth, from yet another address of that
// range, is refused (429, counted), while a pod of the other node and the
// kubelet's probe from the host are still answered.
func TestListenersSharePerNode(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 3*time.Minute)
	p := newProcs(t)
	for name, cidr := range map[string]string{"shares-hostile": "127.0.1.0/24", "shares-other": "127.0.2.0/24"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}
		if _, err := world.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = world.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	addr := testworld.FreeAddrT(t)
	p.aggregator("agg-shares", addr)
	// A pass follows the Node cache's sync, which follows every handler's
	// first list: the listeners know both nodes' ranges.
	waitMetric(t, ctx, addr, "maintenance_handler_aggregator_pass_duration_seconds_count", 1)

	for i := range 16 {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(2+i))}}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	get := func(source net.IP) (int, string) {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: source}}
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
		resp, err := c.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := get(net.IPv4(127, 0, 1, 100)); status != http.StatusTooManyRequests || !strings.Contains(body, "this node's pods") {
		t.Errorf("one more pod of the node holding its share: %d %q, want 429 naming the node's share", status, body)
	}
	for _, source := range []net.IP{net.IPv4(127, 0, 2, 5), net.IPv4(127, 0, 0, 1)} {
		if status, body := get(source); status != http.StatusOK {
			t.Errorf("from %s, while the other node holds its share: %d %q, want 200", source, status, body)
		}
	}
	series := fmt.Sprintf("maintenance_handler_aggregator_connections_refused_total{listener=%q,reason=%q}", "metrics", "over_share")
	if got := metricSum(t, addr, series); got != 1 {
		t.Errorf("%s = %v, want 1", series, got)
	}
}
