package aggregator

import (
	"testing"

	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

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

// gkeClaims are n claims as a pass over GKE's nodes makes them: pools of
// 100 nodes named as GKE names them, each at a resourceVersion of its own.
func gkeClaims(n int) map[string]string {
	out := map[string]string{}
	for i := range n {
		out[fmt.Sprintf("gke-train-a3-pool-%03d-%08x-%04x", i/100, (i/100)*2654435761%(1<<32), (i*40503)%(1<<16))] = fmt.Sprint(184467000 + i*37)
	}
	return out
}

// TestClaimsFitTheLease: 10,000 claims encode within the Lease's
// annotation limit and read back as written; an earlier release's JSON is
// still read, and a value that is neither is unreadable.
func TestClaimsFitTheLease(t *testing.T) {
	claims := gkeClaims(10000)
	encoded := encodeClaims(claims)
	if len(encoded) > maxClaimsBytes {
		t.Errorf("10,000 claims encode to %d bytes, over %d", len(encoded), maxClaimsBytes)
	}
	if asJSON, _ := json.Marshal(claims); len(asJSON) <= 256<<10 {
		t.Errorf("10,000 claims as JSON take %d bytes: the test's claims are smaller than GKE's", len(asJSON))
	}
	if got, err := decodeClaims(encoded); err != nil || !maps.Equal(got, claims) {
		t.Errorf("decoded %d claims (%v), want the %d written", len(got), err, len(claims))
	}
	if got, err := decodeClaims(`{"gpu-0":"17"}`); err != nil || got["gpu-0"] != "17" {
		t.Errorf("an earlier release's claims: %v %v", got, err)
	}
	for _, bad := range []string{"gzip:!!!", "gzip:" + base64.StdEncoding.EncodeToString([]byte("not gzip")), "[1,2]"} {
		if _, err := decodeClaims(bad); err == nil {
			t.Errorf("%q read as claims", bad)
		}
	}
}

// TestPassClaimsWhatFits: a pass whose triggers' claims would overflow the
// Lease claims those that fit, in order, beside every live claim and
// approval, and defers the rest to the next pass.
func TestPassClaimsWhatFits(t *testing.T) {
	maxClaimsBytes = 8 << 10
	t.Cleanup(func() { maxClaimsBytes = 240 << 10 })
	live := map[string]string{"live-0": "1", "live-1": "2"}
	var toTrigger []*corev1.Node
	for name, rv := range gkeClaims(3000) {
		toTrigger = append(toTrigger, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}})
	}
	kept, claimed, deferred := fitClaims(live, toTrigger)
	if deferred == 0 || len(kept) == 0 || len(kept)+deferred != len(toTrigger) {
		t.Fatalf("kept %d, deferred %d of %d: want some of each", len(kept), deferred, len(toTrigger))
	}
	if !slices.Equal(kept, toTrigger[:len(kept)]) {
		t.Error("the triggers kept are not the first ones")
	}
	if claimed["live-0"] != "1" || claimed["live-1"] != "2" || len(claimed) != len(kept)+2 {
		t.Errorf("claims %d, want the %d kept and the 2 live", len(claimed), len(kept))
	}
	if n := len(encodeClaims(claimed)); n > maxClaimsBytes {
		t.Errorf("the claims kept encode to %d bytes, over %d", n, maxClaimsBytes)
	}
	next := maps.Clone(claimed)
	next[toTrigger[len(kept)].Name] = toTrigger[len(kept)].ResourceVersion
	if n := len(encodeClaims(next)); n <= maxClaimsBytes {
		t.Errorf("one more trigger still fits (%d bytes): fitClaims kept too few", n)
	}
}
