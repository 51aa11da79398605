package kube

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"
)

// Load is the client configuration of kubeconfig (empty: $KUBECONFIG, then
// ~/.kube/config, or else the pod's service account and the in-cluster API
// server), as kubectl loads it: its current context, with any credential
// plugin. The client names itself userAgent and sends at most qps requests
// per second, in bursts of burst (zero: client-go's 5 and 10).
//
// A token file (the pod's service account, or a kubeconfig's tokenFile)
// is read again every minute, and at once after a 401: the kubelet
// rotates the token, and the old one may be revoked before the minute is
// up. (client-go does the second only for credential plugins; here its
// resettable file token source does it for the file too.)
func Load(kubeconfig, userAgent string, qps float32, burst int) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	if cfg.BearerTokenFile != "" {
		cfg.Wrap(transport.ResettableTokenSourceWrapTransport(transport.NewCachedFileTokenSource(cfg.BearerTokenFile)))
		cfg.BearerToken, cfg.BearerTokenFile = "", ""
	}
	cfg.UserAgent = userAgent
	cfg.QPS, cfg.Burst = qps, burst
	return cfg, nil
}
