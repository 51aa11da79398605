package testworld

import "testing"

// TestKubernetesRelease: the world runs the newest release unless
// MH_TESTWORLD_KUBERNETES names another, whose staging modules are v0 of
// the same minor and patch; anything else is refused, naming the variable.
func TestKubernetesRelease(t *testing.T) {
	for _, tc := range []struct{ env, release, staging string }{
		{"", NewestKubernetes, "v0" + NewestKubernetes[2:]},
		{OldestKubernetes, OldestKubernetes, "v0" + OldestKubernetes[2:]},
		{"v1.35.10", "v1.35.10", "v0.35.10"},
		{"1.34.4", "", ""},
		{"v1.34", "", ""},
		{"v1.34.4-rc.0", "", ""},
		{"v2.0.0", "", ""},
		{"v1.034.4", "", ""},
	} {
		release, staging, err := kubernetesRelease(tc.env)
		if release != tc.release || staging != tc.staging || (err != nil) != (tc.release == "") {
			t.Errorf("%s=%q: %q %q %v; want %q %q", KubernetesEnv, tc.env, release, staging, err, tc.release, tc.staging)
		}
	}
}
