package main

import (
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeFlags are kubectl's flags for where and as whom to connect
// (--kubeconfig, --context, --cluster, --user, --namespace, --server,
// --token, --as, --request-timeout and the rest of clientcmd's), read as
// kubectl reads them. They are bound with client-go's clientcmd rather
// than cli-runtime's genericclioptions, which brings kustomize and the
// OpenAPI models into the binary (18 MB of a 47 MB plugin) for flags it
// does not add.
type kubeFlags struct {
	loading   clientcmd.ClientConfigLoadingRules
	overrides clientcmd.ConfigOverrides
}

func newKubeFlags() *kubeFlags {
	return &kubeFlags{loading: *clientcmd.NewDefaultClientConfigLoadingRules()}
}

func (f *kubeFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.loading.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file to use for CLI requests.")
	clientcmd.BindOverrideFlags(&f.overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
}

// config is the client configuration the flags and kubeconfig say.
func (f *kubeFlags) config() (*rest.Config, error) {
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&f.loading, &f.overrides).ClientConfig()
}
