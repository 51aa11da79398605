package aggregator

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestResolveClaim(t *testing.T) {
	at := func(rv string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: rv}}
	}
	for _, tc := range []struct {
		name            string
		cached, current *corev1.Node
		want            claimState
	}{
		{"unchanged in the cache: the write may land", at("10"), nil, claimLive},
		{"unchanged on the server, the cache behind", at("9"), at("10"), claimLive},
		{"not in the cache yet, unchanged on the server", nil, at("10"), claimLive},
		{"changed, and the cache shows it", at("12"), at("12"), claimResolved},
		{"changed, the cache not there yet", at("11"), at("12"), claimLive},
		{"changed, not in the cache", nil, at("12"), claimLive},
		{"deleted", nil, nil, claimResolved},
		{"deleted, still in the cache at another version", at("11"), nil, claimResolved},
	} {
		if got := resolve("10", tc.cached, tc.current); got != tc.want {
			t.Errorf("%s: resolve = %d, want %d", tc.name, got, tc.want)
		}
	}
}
