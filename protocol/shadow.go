package protocol

// An observe-only component's writes, kept instead of made.

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Shadow holds what an observe-only component decided to write on one
// Node and did not: for each label, annotation and taint it changed, the
// value it found (before) and the value it chose (after), and the same for
// the cordon. Overlay shows a Node as the component would have left it,
// so that its next decision follows from its last one, as it would after a
// real write.
//
// Each change is kept only while the Node still holds what the component
// found there: once another writer (a person, GKE, the kubelet) changes
// that key, the Node's value wins and the change is forgotten, as a real
// write would have been overwritten. The zero Shadow holds nothing.
type Shadow struct {
	labels, annotations map[string]change[string]
	taints              map[string]change[corev1.Taint]
	cordon              *change[bool]
}

// change is one key's value before and after the unmade write; a nil
// pointer is an absent key.
type change[T any] struct{ before, after *T }

// Empty reports whether the shadow holds no change.
func (s *Shadow) Empty() bool {
	return len(s.labels) == 0 && len(s.annotations) == 0 && len(s.taints) == 0 && s.cordon == nil
}

// Record keeps the changes that turn before into after (two states of one
// Node: as the component read it, with the shadow's overlay, and as it
// would write it). It reports whether the shadow changed.
func (s *Shadow) Record(before, after *corev1.Node) bool {
	changed := record(&s.labels, before.Labels, after.Labels, eqString)
	changed = record(&s.annotations, before.Annotations, after.Annotations, eqString) || changed
	changed = record(&s.taints, taintsByKey(before), taintsByKey(after), eqTaint) || changed
	if b, a := before.Spec.Unschedulable, after.Spec.Unschedulable; b != a {
		if s.cordon == nil {
			s.cordon = &change[bool]{before: &b}
		}
		s.cordon.after = &a
		if *s.cordon.before == a {
			s.cordon = nil
		}
		changed = true
	}
	return changed
}

// Overlay sets on n every change whose key n still holds as the component
// found it, and forgets every other.
func (s *Shadow) Overlay(n *corev1.Node) {
	if len(s.labels) > 0 {
		n.Labels = overlay(s.labels, n.Labels, eqString)
	}
	if len(s.annotations) > 0 {
		n.Annotations = overlay(s.annotations, n.Annotations, eqString)
	}
	if len(s.taints) > 0 {
		// The taints of other keys stay as they are, in their order.
		found := taintsByKey(n)
		shown := overlay(s.taints, found, eqTaint)
		var taints []corev1.Taint
		for _, t := range n.Spec.Taints {
			if _, ours := s.taints[t.Key]; !ours {
				taints = append(taints, t)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(s.taints)) {
			if t, ok := shown[k]; ok {
				taints = append(taints, t)
			}
		}
		n.Spec.Taints = taints
	}
	if c := s.cordon; c != nil {
		if n.Spec.Unschedulable != *c.before {
			s.cordon = nil
		} else {
			n.Spec.Unschedulable = *c.after
		}
	}
}

// Changed lists the labels, annotations and taints the shadow holds a
// change of, sorted, and whether it holds the cordon's.
func (s *Shadow) Changed() (keys []string, cordon bool) {
	for _, m := range []map[string]change[string]{s.labels, s.annotations} {
		keys = append(keys, slices.Collect(maps.Keys(m))...)
	}
	keys = append(keys, slices.Collect(maps.Keys(s.taints))...)
	slices.Sort(keys)
	return slices.Compact(keys), s.cordon != nil
}

func eqString(a, b string) bool { return a == b }

func eqTaint(a, b corev1.Taint) bool {
	return a.Key == b.Key && a.Value == b.Value && a.Effect == b.Effect
}

// taintsByKey is n's taints by key (the first of a key; a Node holds one
// taint per key and effect, and the project writes one effect per key).
func taintsByKey(n *corev1.Node) map[string]corev1.Taint {
	m := make(map[string]corev1.Taint, len(n.Spec.Taints))
	for _, t := range n.Spec.Taints {
		if _, ok := m[t.Key]; !ok {
			m[t.Key] = t
		}
	}
	return m
}

// record adds to *changes each key whose value differs between before and
// after; a key brought back to the value first found is forgotten.
func record[T any](changes *map[string]change[T], before, after map[string]T, eq func(a, b T) bool) bool {
	changed := false
	for _, k := range keysOf(before, after) {
		b, bok := before[k]
		a, aok := after[k]
		if bok == aok && (!bok || eq(a, b)) {
			continue
		}
		changed = true
		if *changes == nil {
			*changes = map[string]change[T]{}
		}
		c, ok := (*changes)[k]
		if !ok {
			c.before = ptrIf(b, bok)
		}
		c.after = ptrIf(a, aok)
		if same(c.before, c.after, eq) {
			delete(*changes, k)
			continue
		}
		(*changes)[k] = c
	}
	return changed
}

// overlay is values with each change applied whose key values still holds
// as found; changes of keys another has changed since are forgotten.
func overlay[T any](changes map[string]change[T], values map[string]T, eq func(a, b T) bool) map[string]T {
	out := maps.Clone(values)
	if out == nil {
		out = map[string]T{}
	}
	for k, c := range changes {
		v, ok := values[k]
		if !same(c.before, ptrIf(v, ok), eq) {
			delete(changes, k) // another writer's value wins
			continue
		}
		if c.after == nil {
			delete(out, k)
		} else {
			out[k] = *c.after
		}
	}
	return out
}

func keysOf[T any](a, b map[string]T) []string {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	return keys
}

func ptrIf[T any](v T, ok bool) *T {
	if !ok {
		return nil
	}
	return &v
}

func same[T any](a, b *T, eq func(a, b T) bool) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return eq(*a, *b)
}

// AnnotationShadow holds, on an observed node's Lease in the agents'
// namespace (named as the node), the agent's unmade writes: its Shadow,
// encoded (Encode). The aggregator reads them as the agent's state.
const AnnotationShadow = "maintenance-handler.io/shadow"

// ObservedNodeLabels label an observed node's Lease, which
// ObservedNodeSelector selects.
var ObservedNodeLabels = map[string]string{"app.kubernetes.io/name": "maintenance-handler", "app.kubernetes.io/component": "observed-node"}

// ObservedNodeSelector selects the observed nodes' Leases.
const ObservedNodeSelector = "app.kubernetes.io/component=observed-node"

// Clone is a copy of s that shares nothing with it.
func (s *Shadow) Clone() Shadow {
	c := Shadow{labels: maps.Clone(s.labels), annotations: maps.Clone(s.annotations), taints: maps.Clone(s.taints)}
	if s.cordon != nil {
		cordon := *s.cordon
		c.cordon = &cordon
	}
	return c
}

// wireShadow is a Shadow's JSON.
type wireShadow struct {
	Labels      map[string]wireChange[string]       `json:"labels,omitempty"`
	Annotations map[string]wireChange[string]       `json:"annotations,omitempty"`
	Taints      map[string]wireChange[corev1.Taint] `json:"taints,omitempty"`
	Cordon      *wireChange[bool]                   `json:"cordon,omitempty"`
}

type wireChange[T any] struct {
	Before *T `json:"before,omitempty"`
	After  *T `json:"after,omitempty"`
}

func toWire[T any](m map[string]change[T]) map[string]wireChange[T] {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]wireChange[T], len(m))
	for k, c := range m {
		out[k] = wireChange[T]{Before: c.before, After: c.after}
	}
	return out
}

func fromWire[T any](m map[string]wireChange[T]) map[string]change[T] {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]change[T], len(m))
	for k, c := range m {
		out[k] = change[T]{before: c.Before, after: c.After}
	}
	return out
}

// Encode is s as AnnotationShadow holds it.
func (s *Shadow) Encode() string {
	w := wireShadow{Labels: toWire(s.labels), Annotations: toWire(s.annotations), Taints: toWire(s.taints)}
	if s.cordon != nil {
		c := wireChange[bool]{Before: s.cordon.before, After: s.cordon.after}
		w.Cordon = &c
	}
	b, _ := json.Marshal(w)
	return string(b)
}

// DecodeShadow reads what Encode wrote.
func DecodeShadow(v string) (Shadow, error) {
	var w wireShadow
	if err := json.Unmarshal([]byte(v), &w); err != nil {
		return Shadow{}, fmt.Errorf("%s: %w", AnnotationShadow, err)
	}
	s := Shadow{labels: fromWire(w.Labels), annotations: fromWire(w.Annotations), taints: fromWire(w.Taints)}
	if w.Cordon != nil {
		if w.Cordon.Before == nil || w.Cordon.After == nil {
			return Shadow{}, fmt.Errorf("%s: the cordon's change lacks a value", AnnotationShadow)
		}
		c := change[bool]{before: w.Cordon.Before, after: w.Cordon.After}
		s.cordon = &c
	}
	return s, nil
}
