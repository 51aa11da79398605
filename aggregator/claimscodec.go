package aggregator

// The claims' encoding on the claims Lease. The claims of a pass are one
// annotation, and a Kubernetes object's annotations may hold 256 KiB in
// all: as JSON ({"node": "resourceVersion"}) that is about 4,500 claims.
// They are written sorted, one "node resourceVersion" line each, gzipped
// and base64-encoded after a "gzip:" prefix: GKE's node names share their
// pool's prefix and resourceVersions their leading digits, so 10,000
// claims take about a tenth of the limit. A pass whose claims would not fit
// under maxClaimsBytes claims as many of its triggers as fit, in order, and
// leaves the rest to the next pass; the claims of an earlier one are never
// dropped. A release before this one wrote JSON, which is still read.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// claimsPrefix marks the encoded claims.
const claimsPrefix = "gzip:"

// maxClaimsBytes bounds the claims annotation, under the API server's
// 256 KiB for all of an object's annotations (the fence's is short).
var maxClaimsBytes = 240 << 10

// encodeClaims is the annotation's value for nodes.
func encodeClaims(nodes map[string]string) string {
	var raw bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&raw, gzip.BestCompression)
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		fmt.Fprintf(zw, "%s %s\n", name, nodes[name])
	}
	_ = zw.Close()
	return claimsPrefix + base64.StdEncoding.EncodeToString(raw.Bytes())
}

// decodeClaims reads the annotation's value: encoded, or a JSON object as
// an earlier release wrote.
func decodeClaims(value string) (map[string]string, error) {
	nodes := map[string]string{}
	encoded, ok := strings.CutPrefix(value, claimsPrefix)
	if !ok {
		err := json.Unmarshal([]byte(value), &nodes)
		return nodes, err
	}
	raw, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return nodes, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nodes, err
	}
	lines := bufio.NewScanner(zr)
	for lines.Scan() {
		name, rv, ok := strings.Cut(lines.Text(), " ")
		if !ok || name == "" {
			return nodes, fmt.Errorf("claim %q: want \"node resourceVersion\"", lines.Text())
		}
		nodes[name] = rv
	}
	return nodes, lines.Err()
}

// fitClaims keeps of toTrigger the most, in order, whose claims with
// every other (the live ones, the approved repairs') encode within
// maxClaimsBytes, and returns them with the claims; deferred is how many
// it left to the next pass.
func fitClaims(others map[string]string, toTrigger []*corev1.Node) (kept []*corev1.Node, claimed map[string]string, deferred int) {
	with := func(k int) map[string]string {
		c := maps.Clone(others)
		for _, n := range toTrigger[:k] {
			c[n.Name] = n.ResourceVersion
		}
		return c
	}
	if all := with(len(toTrigger)); len(encodeClaims(all)) <= maxClaimsBytes {
		return toTrigger, all, 0
	}
	k := sort.Search(len(toTrigger)+1, func(k int) bool { return len(encodeClaims(with(k))) > maxClaimsBytes }) - 1
	k = max(k, 0)
	return toTrigger[:k], with(k), len(toTrigger) - k
}
